// Command secret-syncer keeps the pull Secrets kuik injects into pods: one per routing resource
// and namespace that needs it.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/enix/kuik/cmd/secret-syncer/app"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	// The logger is built from the command line (-v, --zap-*) and handed down in the context.
	if err := app.NewCommand(app.Run).ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "secret-syncer:", err)
		stop()
		os.Exit(1)
	}
}
