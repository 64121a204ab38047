package testenv

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// Versions are the pinned versions of hack/versions.env.
type Versions map[string]string

// RepoRoot is the root of the kuik repository this package was compiled from.
func RepoRoot() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		panic("testenv: cannot locate source file")
	}
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// ReadVersions parses hack/versions.env.
func ReadVersions() (Versions, error) {
	path := filepath.Join(RepoRoot(), "hack", "versions.env")
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading pinned versions: %w", err)
	}
	defer f.Close()
	v := Versions{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := strings.TrimSpace(s.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, val, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("%s: malformed line %q", path, line)
		}
		v[k] = val
	}
	return v, s.Err()
}

// CacheDir is where hack/controlplane.sh keeps what it builds.
func CacheDir() (string, error) {
	if d := os.Getenv("KUIK_CACHE_DIR"); d != "" {
		return d, nil
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "kuik"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("locating the cache directory: %w", err)
	}
	return filepath.Join(home, ".cache", "kuik"), nil
}

// AssetsDir is the directory holding etcd, kube-apiserver, kube-controller-manager and kubectl:
// $KUIK_ASSETS, or the one hack/controlplane.sh fills for the pinned versions.
func AssetsDir() (string, error) {
	dir := os.Getenv("KUIK_ASSETS")
	if dir == "" {
		v, err := ReadVersions()
		if err != nil {
			return "", err
		}
		cache, err := CacheDir()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(cache, "assets", "k8s-"+v["KUBERNETES_VERSION"]+"-etcd-"+v["ETCD_VERSION"])
	}
	for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return "", fmt.Errorf("control-plane binary %s not found in %s: run hack/controlplane.sh (make controlplane) first", b, dir)
			}
			return "", fmt.Errorf("control-plane binary %s: %w", b, err)
		}
	}
	return dir, nil
}
