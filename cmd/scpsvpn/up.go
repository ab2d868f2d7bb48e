package main

// `scpsvpn up`: run one endpoint in the foreground until SIGINT/SIGTERM;
// SIGHUP re-reads the config and applies peer changes.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"scpsvpn/configs"
	"scpsvpn/tunnel"
)

func upCommand() *cli.Command {
	return &cli.Command{
		Name:  "up",
		Usage: "run an endpoint in the foreground until SIGINT or SIGTERM",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "config", Aliases: []string{"c"}, Usage: "config file (TOML)", Required: true},
			&cli.StringFlag{Name: "cpuprofile", Usage: "write a CPU profile to this file; %p becomes the PID (for developers)", Hidden: true, EnvVars: []string{"SCPSVPN_CPUPROFILE"}},
			&cli.StringFlag{Name: "trace", Usage: "write a runtime execution trace to this file; %p becomes the PID (for developers: go tool trace)", Hidden: true, EnvVars: []string{"SCPSVPN_TRACE"}},
		},
		Action: func(c *cli.Context) error {
			for _, r := range []struct {
				flag  string
				start func(io.Writer) error
				stop  func()
			}{{"cpuprofile", pprof.StartCPUProfile, pprof.StopCPUProfile}, {"trace", trace.Start, trace.Stop}} {
				stop, err := startRecord(r.flag, c.String(r.flag), r.start, r.stop)
				if err != nil {
					return err
				}
				defer stop()
			}
			// Signals first: os/signal's own loop goroutine then counts
			// in the baseline that reportLeftovers compares against.
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			baseline := runtime.NumGoroutine()
			path := c.String("config")
			cfg, err := configs.Load(path)
			if err != nil {
				return err
			}
			log := newLogger(cfg.LogLevel)
			warnMemoryLimit(log, cfg.Memory, "/proc/self/cgroup", "/sys/fs/cgroup")
			ep, err := tunnel.New(cfg, log, tunnel.Options{})
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				superviseEndpoint(ctx, ep, hup, path, log)
			}()
			stopMetrics := func() {}
			if cfg.Metrics.IsValid() {
				stopMetrics = serveMetrics(cfg.Metrics, ep, log)
			}
			err = ep.Run(ctx)
			stop()
			wg.Wait()
			stopMetrics()
			reportLeftovers(log, baseline)
			return err
		},
	}
}

// startRecord starts one of the developers' records of the run (--flag:
// a CPU profile, an execution trace) into the file path names, "%p" in it
// being the PID; stop ends it and closes the file. No path: nothing.
func startRecord(flag, path string, start func(io.Writer) error, stop func()) (func(), error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(strings.ReplaceAll(path, "%p", strconv.Itoa(os.Getpid())))
	if err != nil {
		return nil, fmt.Errorf("--%s: %w", flag, err)
	}
	if err := start(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--%s: %w", flag, err)
	}
	return func() {
		stop()
		f.Close()
	}, nil
}

// superviseEndpoint tells systemd when the endpoint is ready and when it
// stops, and applies SIGHUP reloads. A reload asked for before the
// endpoint is up waits until it is: the endpoint has nothing to reload yet.
func superviseEndpoint(ctx context.Context, ep *tunnel.Endpoint, hup <-chan os.Signal, path string, log *slog.Logger) {
	notify := func(state string) {
		if err := sdNotify(state); err != nil {
			log.Warn("telling systemd", "state", state, "err", err)
		}
	}
	ready, pending := ep.Ready(), false
	reload := func() {
		notify(reloadingState())
		defer notify("READY=1")
		nc, err := configs.Load(path)
		if err != nil {
			log.Error("reload: config rejected, keeping the running one", "err", err)
			return
		}
		if err := ep.Reload(nc); err != nil {
			log.Error("reload", "err", err)
		}
	}
	for {
		select {
		case <-ctx.Done():
			notify("STOPPING=1")
			return
		case <-ready:
			ready = nil
			notify("READY=1\nSTATUS=carrying traffic")
			if pending {
				pending = false
				reload()
			}
		case <-hup:
			if ready != nil {
				log.Info("reload: waiting until the endpoint is up")
				pending = true
				continue
			}
			reload()
		}
	}
}

// reportLeftovers logs how many goroutines outlived the endpoint (the
// end-to-end tests check it is none) and, at debug level, their stacks.
func reportLeftovers(log *slog.Logger, baseline int) {
	n := runtime.NumGoroutine()
	for deadline := time.Now().Add(2 * time.Second); n > baseline && time.Now().Before(deadline); n = runtime.NumGoroutine() {
		time.Sleep(20 * time.Millisecond)
	}
	log.Info("endpoint exited", "leftover_goroutines", n-baseline)
	if n > baseline && log.Enabled(context.Background(), slog.LevelDebug) {
		buf := make([]byte, 1<<20)
		log.Debug("goroutines", "stacks", string(buf[:runtime.Stack(buf, true)]))
	}
}

func newLogger(level string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
}

func configCommand() *cli.Command {
	return &cli.Command{
		Name:  "config",
		Usage: "work with config files",
		Subcommands: []*cli.Command{{
			Name:  "check",
			Usage: "validate a config file and print the effective config",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "config", Aliases: []string{"c"}, Usage: "config file (TOML)", Required: true},
			},
			Action: func(c *cli.Context) error {
				cfg, err := configs.Load(c.String("config"))
				if err != nil {
					return err
				}
				out, err := cfg.Effective()
				if err != nil {
					return fmt.Errorf("render config: %w", err)
				}
				_, err = os.Stdout.Write(out)
				return err
			},
		}},
	}
}
