// Command keeper copies the images pods run into the keep-enabled ImageMirrors, verbatim and
// paced, and garbage-collects the tags it wrote once no pod needs them.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/enix/kuik/cmd/keeper/app"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	// The logger is built from the command line (-v, --zap-*) and handed down in the context.
	if err := app.NewCommand(app.Run).ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "keeper:", err)
		stop()
		os.Exit(1)
	}
}
