// Command guest is the one program of the images internal/testnode builds for its node (there
// is no base image to pull): static, standard library only.
//
//	guest pause        sleep until SIGTERM or SIGINT, reaping orphans: the pod sandbox's
//	                   init process (what registry.k8s.io/pause does), or a container that
//	                   only needs to run
//	guest whoami       ask the API server who this pod's service account is, the way
//	                   in-cluster clients reach it (KUBERNETES_SERVICE_HOST/PORT, the mounted
//	                   token and CA); print the username and exit 0, or exit 1 after 60 s
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: guest pause|whoami")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "pause":
		pause()
	case "whoami":
		if err := whoami(); err != nil {
			fmt.Fprintln(os.Stderr, "whoami:", err)
			os.Exit(1)
		}
	default:
		fmt.Fprintf(os.Stderr, "guest: unknown command %q\n", os.Args[1])
		os.Exit(2)
	}
}

func pause() {
	sig := make(chan os.Signal, 8)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sig {
		if s != syscall.SIGCHLD {
			return
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}

const serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// whoami posts a SelfSubjectReview, which every authenticated identity may create, and prints
// the username the API server saw. It retries: the Service's rules may not be in place yet.
func whoami() error {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return errors.New("KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set")
	}
	token, err := os.ReadFile(serviceAccountDir + "/token")
	if err != nil {
		return fmt.Errorf("reading the service-account token: %w", err)
	}
	caPEM, err := os.ReadFile(serviceAccountDir + "/ca.crt")
	if err != nil {
		return fmt.Errorf("reading the cluster CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return errors.New("no certificate in ca.crt")
	}
	client := &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}},
	}
	url := "https://" + net.JoinHostPort(host, port) + "/apis/authentication.k8s.io/v1/selfsubjectreviews"
	body := `{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		user, err := review(ctx, client, url, body, strings.TrimSpace(string(token)))
		if err == nil {
			_, err := fmt.Fprintf(os.Stdout, "user=%s via %s\n", user, url)
			return err
		}
		fmt.Fprintln(os.Stderr, "whoami: retrying:", err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func review(ctx context.Context, client *http.Client, url, body, token string) (string, error) {
	// The URL is the API server's, from the environment the kubelet gives the pod.
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body)) //nolint:gosec // see above

	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req) //nolint:gosec // the API server's URL, as above
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", resp.Status, b)
	}
	var r struct {
		Status struct {
			UserInfo struct {
				Username string `json:"username"`
			} `json:"userInfo"`
		} `json:"status"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return "", fmt.Errorf("decoding the review: %w", err)
	}
	return r.Status.UserInfo.Username, nil
}
