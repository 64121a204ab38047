package testenv

import (
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Client configs for a running control plane, and kubeconfig files.

// Config is an admin (system:masters) client config.
func (cp *ControlPlane) Config() *rest.Config {
	return rest.CopyConfig(cp.admin)
}

// ConfigAs is a client config that impersonates user with groups, so RBAC, admission webhooks
// and ValidatingAdmissionPolicies see that identity exactly as they would a real one.
func (cp *ControlPlane) ConfigAs(user string, groups ...string) *rest.Config {
	c := cp.Config()
	c.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: append([]string{"system:authenticated"}, groups...)}
	return c
}

// ConfigAsServiceAccount impersonates a ServiceAccount, with the groups the API server gives
// a real one.
func (cp *ControlPlane) ConfigAsServiceAccount(namespace, name string) *rest.Config {
	return cp.ConfigAs("system:serviceaccount:"+namespace+":"+name,
		"system:serviceaccounts", "system:serviceaccounts:"+namespace)
}

// WriteKubeconfig writes a kubeconfig for server, trusting ca, authenticating with user's
// client certificate.
func WriteKubeconfig(path, server string, ca []byte, user KeyPair) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["testenv"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: user.CertPEM, ClientKeyData: user.KeyPEM}
	cfg.Contexts["testenv"] = &clientcmdapi.Context{Cluster: "testenv", AuthInfo: "admin"}
	cfg.CurrentContext = "testenv"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("writing kubeconfig: %w", err)
	}
	return nil
}
