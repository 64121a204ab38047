package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// CA is a throwaway certificate authority for one control plane and the test servers it calls.
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// PEM is the CA certificate, for caBundle fields and client configs.
	PEM []byte
}

// NewCA makes a CA valid for a day.
func NewCA() (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "kuik-testenv-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("signing CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parsing CA: %w", err)
	}
	return &CA{cert: cert, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// KeyPair is a PEM certificate and key signed by a CA.
type KeyPair struct {
	CertPEM, KeyPEM []byte
}

// TLSCertificate returns the pair for a tls.Config.
func (k KeyPair) TLSCertificate() (tls.Certificate, error) {
	return tls.X509KeyPair(k.CertPEM, k.KeyPEM)
}

// WriteFiles writes the pair as <dir>/<name>.crt and <dir>/<name>.key.
func (k KeyPair) WriteFiles(dir, certName, keyName string) error {
	if err := os.WriteFile(filepath.Join(dir, certName), k.CertPEM, 0o600); err != nil {
		return fmt.Errorf("writing certificate: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, keyName), k.KeyPEM, 0o600); err != nil {
		return fmt.Errorf("writing key: %w", err)
	}
	return nil
}

// ServingPair signs a server certificate for 127.0.0.1 and localhost, plus extra DNS names.
func (ca *CA) ServingPair(dnsNames ...string) (KeyPair, error) {
	return ca.ServingPairFor([]net.IP{net.IPv4(127, 0, 0, 1)}, dnsNames...)
}

// ServingPairFor signs a server certificate for these addresses, localhost and extra DNS names.
func (ca *CA) ServingPairFor(ips []net.IP, dnsNames ...string) (KeyPair, error) {
	return ca.sign(&x509.Certificate{
		Subject:     pkix.Name{CommonName: ips[0].String()},
		IPAddresses: ips,
		DNSNames:    append([]string{"localhost"}, dnsNames...),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
}

// ClientPair signs a client certificate for a user and its groups.
func (ca *CA) ClientPair(user string, groups ...string) (KeyPair, error) {
	return ca.sign(&x509.Certificate{
		Subject:     pkix.Name{CommonName: user, Organization: groups},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
}

func (ca *CA) sign(tmpl *x509.Certificate) (KeyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return KeyPair{}, fmt.Errorf("generating key: %w", err)
	}
	tmpl.SerialNumber = serial()
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(24 * time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return KeyPair{}, fmt.Errorf("signing certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return KeyPair{}, fmt.Errorf("encoding key: %w", err)
	}
	return KeyPair{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

// writeServiceAccountKeys writes the RSA key pair the API server signs service-account tokens with.
func writeServiceAccountKeys(dir string) (pub, priv string, err error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return "", "", fmt.Errorf("generating service-account key: %w", err)
	}
	pubDER, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return "", "", fmt.Errorf("encoding service-account key: %w", err)
	}
	pub, priv = filepath.Join(dir, "sa.pub"), filepath.Join(dir, "sa.key")
	if err := os.WriteFile(pub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o600); err != nil {
		return "", "", fmt.Errorf("writing service-account key: %w", err)
	}
	privPEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	if err := os.WriteFile(priv, privPEM, 0o600); err != nil {
		return "", "", fmt.Errorf("writing service-account key: %w", err)
	}
	return pub, priv, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		panic(err)
	}
	return n
}
