//go:build unix

package credentialprovider

import (
	"os/exec"
	"syscall"
)

// killProcessGroup runs the plugin in a process group of its own and makes the command's
// cancellation (timeout, or every caller gone) kill the whole group, so that a plugin's own
// children do not outlive it.
func killProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}
