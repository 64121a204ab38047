package testnode

// TrustPlainHTTP tells the node's containerd to reach host (host:port) over plain HTTP, as
// Registry does for the registries it starts: for a registry started another way (the demo's).
func (n *Node) TrustPlainHTTP(host string) error { return n.writeRegistryHosts(host) }
