// Command ttft measures, simulates, routes and analyses the time to first
// token of LLM inference services. All behaviour lives in internal/cli.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"
	"golang.org/x/term"

	"github.com/ttft-dev/ttft/internal/cli"
)

func main() {
	// go-redis logs every failed dial on stderr through a process-wide
	// logger, many lines a second while Redis is down; the gateway's shared
	// state says itself, once, that it lost Redis and routes on local state.
	redis.SetLogger(&logging.VoidLogger{})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	exe, _ := os.Executable()
	code := cli.Main(ctx, cli.Env{
		Executable: exe,
		Args:       os.Args[1:], Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv,
		IsTerminal: term.IsTerminal(int(os.Stderr.Fd())),
	})
	stop()
	os.Exit(code)
}
