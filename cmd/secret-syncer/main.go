// Command secret-syncer keeps the pull Secrets kuik injects into pods: one per routing resource
// and namespace that needs it.
package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/enix/kuik/cmd/secret-syncer/app"
)

func main() {
	logger := logr.FromSlogHandler(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctrl.SetLogger(logger)
	klog.SetLogger(logger)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx = logr.NewContext(ctx, logger)

	cmd := app.NewCommand(app.Run)
	if err := cmd.ExecuteContext(ctx); err != nil {
		logger.Error(err, "secret-syncer failed")
		stop()
		os.Exit(1)
	}
}
