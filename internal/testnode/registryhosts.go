package testnode

import (
	"os"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// TrustPlainHTTP tells the node's containerd to reach host (host:port) over plain HTTP, as
// Registry does for the registries it starts: for a registry started another way (the demo's).
func (n *Node) TrustPlainHTTP(host string) error { return n.writeRegistryHosts(host) }

// TrustCA tells the node's containerd to reach host (host:port) over HTTPS and to verify its
// certificate with caPEM (a private CA), as a node configured for a private registry does.
func (n *Node) TrustCA(host string, caPEM []byte) error { return n.writeRegistryCA(host, caPEM) }

// GuestImage is an image of the guest program labelled label (see the function GuestImage),
// for images pushed another way than PushGuest.
func (n *Node) GuestImage(label string) (v1.Image, error) { return GuestImage(n.guest, label) }

// HostDir is Dir as the host sees it (outside the node's mount namespace): <run>/node.
func (n *Node) HostDir() string { return filepath.Join(os.Getenv(runEnv), "node") }
