//go:build !unix

package credentialprovider

import "os/exec"

// killProcessGroup leaves exec's default: the cancellation kills the plugin process only.
func killProcessGroup(*exec.Cmd) {}
