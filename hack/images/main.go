// Command images builds kuik's webhook, secret-syncer and keeper images from source, without a
// container engine (see internal/images), writes them as an OCI layout and optionally pushes them.
//
//	go run ./hack/images [-out _output/images] [-bin _output/bin] [-platforms linux/amd64,linux/arm64]
//	                     [-registry host[:port][/path] [-insecure]] [-tag TAG]
//
// The tag defaults to the chart's appVersion, so that `helm install` with only the repositories
// set finds the images. Pushing authenticates with REGISTRY_USERNAME and REGISTRY_PASSWORD when
// set, otherwise with the Docker config (~/.docker/config.json, credential helpers). It prints
// each image as <repository>:<tag>@<digest>.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"go.yaml.in/yaml/v3"

	"github.com/enix/kuik/internal/images"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	var usage usageError
	switch {
	case err == nil:
	case errors.As(err, &usage):
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

type usageError struct{ error }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("images", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "_output/images", "OCI layout to write (replaced); empty for none")
	bin := fs.String("bin", "_output/bin", "where go build keeps the binaries between runs")
	platforms := fs.String("platforms", "linux/amd64,linux/arm64", "comma-separated os/arch[/variant]")
	registry := fs.String("registry", "", "push to this registry and path prefix, e.g. registry.local:5000/kuik")
	insecure := fs.Bool("insecure", false, "talk plain HTTP to the registry")
	tag := fs.String("tag", "", "tag (default: the appVersion of charts/kuik/Chart.yaml)")
	chart := fs.String("chart", "charts/kuik", "chart whose appVersion is the default tag")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	if fs.NArg() != 0 {
		return usageError{fmt.Errorf("unexpected arguments %q", fs.Args())}
	}
	ps, err := parsePlatforms(*platforms)
	if err != nil {
		return usageError{err}
	}
	if *tag == "" {
		if *tag, err = appVersion(*chart); err != nil {
			return err
		}
	}

	start := time.Now()
	src, err := images.GitSource(ctx, ".")
	if err != nil {
		return err
	}
	imgs, err := images.Build(ctx, images.Options{Platforms: ps, BinDir: *bin, Source: src})
	if err != nil {
		return err
	}
	_, _ = fmt.Fprintf(stderr, "built %d images for %s in %s (source %s, %s)\n", len(imgs), *platforms,
		time.Since(start).Round(100*time.Millisecond), orNone(src.Revision), src.Created.Format(time.RFC3339))
	for _, img := range imgs {
		if err := describe(stderr, img); err != nil {
			return err
		}
	}
	if *out != "" {
		if err := images.WriteLayout(*out, imgs, *tag); err != nil {
			return err
		}
		_, _ = fmt.Fprintf(stderr, "OCI layout: %s\n", *out)
	}
	if *registry == "" {
		for _, img := range imgs {
			d, err := img.Index.Digest()
			if err != nil {
				return fmt.Errorf("digest of %s: %w", img.Component.Name, err)
			}
			if _, err := fmt.Fprintf(stdout, "%s:%s@%s\n", img.Component.Name, *tag, d); err != nil {
				return fmt.Errorf("writing the references: %w", err)
			}
		}
		return nil
	}
	refs, err := images.Push(ctx, imgs, images.PushOptions{
		Prefix: *registry, Tag: *tag, Insecure: *insecure,
		Remote: []remote.Option{remote.WithAuthFromKeychain(keychain(os.Getenv))},
	})
	if err != nil {
		return err
	}
	for _, r := range refs {
		if _, err := fmt.Fprintf(stdout, "%s:%s@%s\n", r.Context(), *tag, r.DigestStr()); err != nil {
			return fmt.Errorf("writing the references: %w", err)
		}
	}
	return nil
}

// describe prints an index's platforms and compressed sizes.
func describe(w io.Writer, img images.Image) error {
	m, err := img.Index.IndexManifest()
	if err != nil {
		return fmt.Errorf("index of %s: %w", img.Component.Name, err)
	}
	for _, desc := range m.Manifests {
		child, err := img.Index.Image(desc.Digest)
		if err != nil {
			return fmt.Errorf("%s %s: %w", img.Component.Name, desc.Platform, err)
		}
		layers, err := child.Layers()
		if err != nil {
			return fmt.Errorf("%s %s: %w", img.Component.Name, desc.Platform, err)
		}
		var size int64
		for _, l := range layers {
			s, err := l.Size()
			if err != nil {
				return fmt.Errorf("%s %s: %w", img.Component.Name, desc.Platform, err)
			}
			size += s
		}
		_, _ = fmt.Fprintf(w, "  %-20s %-12s %5.1f MiB compressed\n", img.Component.Name, desc.Platform, float64(size)/(1<<20))
	}
	return nil
}

// keychain authenticates with REGISTRY_USERNAME/REGISTRY_PASSWORD when set, otherwise as the
// Docker config says.
func keychain(getenv func(string) string) authn.Keychain {
	if u := getenv("REGISTRY_USERNAME"); u != "" {
		return staticKeychain{authn.FromConfig(authn.AuthConfig{Username: u, Password: getenv("REGISTRY_PASSWORD")})}
	}
	return authn.DefaultKeychain
}

type staticKeychain struct{ authn.Authenticator }

func (k staticKeychain) Resolve(authn.Resource) (authn.Authenticator, error) {
	return k.Authenticator, nil
}

func parsePlatforms(s string) ([]v1.Platform, error) {
	var out []v1.Platform
	for _, f := range strings.Split(s, ",") {
		p, err := v1.ParsePlatform(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("platform %q: %w", f, err)
		}
		if p.OS != "linux" || p.Architecture == "" {
			return nil, fmt.Errorf("platform %q: want linux/ARCH[/VARIANT]", f)
		}
		out = append(out, *p)
	}
	return out, nil
}

func appVersion(chartDir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		return "", fmt.Errorf("reading the chart for the default tag: %w", err)
	}
	var c struct {
		AppVersion string `yaml:"appVersion"`
	}
	if err := yaml.Unmarshal(b, &c); err != nil {
		return "", fmt.Errorf("parsing %s/Chart.yaml: %w", chartDir, err)
	}
	if c.AppVersion == "" {
		return "", fmt.Errorf("%s/Chart.yaml has no appVersion: pass -tag", chartDir)
	}
	return c.AppVersion, nil
}

func orNone(s string) string {
	if s == "" {
		return "no git revision"
	}
	return s
}
