package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	keeperapp "github.com/enix/kuik/cmd/keeper/app"
	syncerapp "github.com/enix/kuik/cmd/secret-syncer/app"
	webhookapp "github.com/enix/kuik/cmd/webhook/app"
)

// flagsPage lists the flags of every binary and their subcommands, from the commands the
// binaries build (without run functions: nothing runs).
func flagsPage(string) (string, error) {
	var b strings.Builder
	b.WriteString("The flags of each binary, with their built-in defaults.\n" +
		"The chart sets most of them from its values (see values.md).\n" +
		"The logging flags of a binary are those of its subcommands too.\n")
	for _, cmd := range []*cobra.Command{webhookapp.NewCommand(nil, nil), syncerapp.NewCommand(nil), keeperapp.NewCommand(nil)} {
		fmt.Fprintf(&b, "\n## %s\n\n%s.\n\n", cmd.Name(), cmd.Short)
		b.WriteString(flagTable(cmd.LocalNonPersistentFlags()))
		fmt.Fprintf(&b, "\n### Logging flags\n\n")
		b.WriteString(flagTable(cmd.PersistentFlags()))
		for _, sub := range cmd.Commands() {
			if sub.Hidden || !sub.IsAvailableCommand() {
				continue
			}
			fmt.Fprintf(&b, "\n### %s %s\n\n%s.\n\n", cmd.Name(), sub.Name(), sub.Short)
			b.WriteString(flagTable(sub.LocalNonPersistentFlags()))
		}
	}
	return b.String(), nil
}

// flagTable renders the visible flags of fs, sorted by name.
func flagTable(fs *pflag.FlagSet) string {
	var b strings.Builder
	b.WriteString("| Flag | Type | Default | Description |\n|------|------|---------|-------------|\n")
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		name := "`--" + f.Name + "`"
		if f.Shorthand != "" {
			name = "`-" + f.Shorthand + "`, " + name
		}
		usage := f.Usage
		if _, ok := f.Annotations[cobra.BashCompOneRequiredFlag]; ok {
			usage = "Required. " + usage
		}
		if f.Deprecated != "" {
			usage += " Deprecated: " + f.Deprecated
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", name, f.Value.Type(), defaultOf(f), cell(usage))
	})
	return b.String()
}

func defaultOf(f *pflag.Flag) string {
	if d := f.DefValue; d != "" && d != "[]" {
		return code(d)
	}
	return ""
}
