package keeper

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enix/kuik/internal/credentialprovider"
	"github.com/enix/kuik/internal/credentials"
	"github.com/enix/kuik/internal/routing"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// CredentialError is a credential that did not resolve. Reason is a KeepReady condition reason
// (SecretNotFound, NotDockerConfig, InvalidDockerConfig, NoCredentialForPath) or, for a
// provider entry without a credential the secret-syncer obtained, the failure reason
// AuthRequired.
type CredentialError struct {
	reason string
	err    error
}

func (e *CredentialError) Error() string { return e.err.Error() }
func (e *CredentialError) Unwrap() error { return e.err }

// Reason says why the credential did not resolve, in the API's words.
func (e *CredentialError) Reason() string { return e.reason }

// secretCredentials resolves credentials from dockerconfigjson Secrets of the release
// namespace, read from the keeper's cache (which holds no other namespace's Secrets): the
// secretRef Secrets, and the kuik-provider-* Secrets the secret-syncer writes. It runs no
// credential-provider plugin.
type secretCredentials struct {
	reader    client.Reader
	namespace string
	// now is the clock a provider credential's expiry is checked against.
	now func() time.Time
}

// Push is the credential of the mirror's spec.keep.push.auth.secretRef for its destination,
// chosen as the syncer chooses destination.pull's (routing.MirrorLookupPath); anonymous
// without push.auth.
func (c *secretCredentials) Push(ctx context.Context, mirror *v1alpha1.ImageMirror) (authn.Authenticator, error) {
	k := mirror.Spec.Keep
	if k == nil || k.Push == nil || k.Push.Auth == nil {
		return authn.Anonymous, nil
	}
	return c.lookup(ctx, k.Push.Auth.SecretRef.Name, routing.MirrorLookupPath(&mirror.Spec.Destination))
}

// Source is the credential of a routing entry's auth for image: anonymous when auth is nil;
// for a secretRef, the Secret's credential for the image's repository; for a provider, the
// unexpired credential the secret-syncer obtained and keeps in the provider's kuik-provider-*
// Secret (see provider). Never a pod's imagePullSecrets; never anonymous for an auth.
func (c *secretCredentials) Source(ctx context.Context, auth *v1alpha1.Auth, image string) (authn.Authenticator, error) {
	switch {
	case auth == nil:
		return authn.Anonymous, nil
	case auth.SecretRef != nil:
		repo, err := routing.Repository(image)
		if err != nil {
			return nil, &CredentialError{reason: v1alpha1.ReasonNoCredentialForPath, err: fmt.Errorf("image %q: %w", image, err)}
		}
		return c.lookup(ctx, auth.SecretRef.Name, repo)
	case auth.Provider != nil:
		return c.provider(ctx, auth.Provider, image)
	default:
		return nil, &CredentialError{reason: string(v1alpha1.KeepAuthRequired), err: errors.New("auth names neither a secretRef nor a provider")}
	}
}

// provider is the credential the secret-syncer keeps for p in its kuik-provider-* Secret of the
// release namespace (credentialprovider.SecretName), for the image's repository by the keyring
// rules (credentialprovider.Stored). The keeper runs no plugin: a Secret missing, or without an
// unexpired credential of that provider and ServiceAccount for the repository, is AuthRequired.
func (c *secretCredentials) provider(ctx context.Context, p *v1alpha1.ProviderAuth, image string) (authn.Authenticator, error) {
	notYet := func(why string) error {
		return &CredentialError{reason: string(v1alpha1.KeepAuthRequired), err: fmt.Errorf("provider %q: the secret-syncer has not (yet) obtained a credential for %s: %s", p.Name, image, why)}
	}
	repo, err := routing.Repository(image)
	if err != nil {
		return nil, &CredentialError{reason: string(v1alpha1.KeepAuthRequired), err: fmt.Errorf("provider %q: image %q: %w", p.Name, image, err)}
	}
	name := credentialprovider.SecretName(p.Name, p.ServiceAccountRef)
	var s corev1.Secret
	if err := c.reader.Get(ctx, client.ObjectKey{Namespace: c.namespace, Name: name}, &s); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, notYet(fmt.Sprintf("secret %q not found in namespace %s", name, c.namespace))
		}
		return nil, fmt.Errorf("reading secret %q: %w", name, err)
	}
	o, _ := credentialprovider.Stored(&s, p.Name, p.ServiceAccountRef, repo, c.now())
	if o == nil {
		return nil, notYet(fmt.Sprintf("secret %q holds no unexpired credential for it", name))
	}
	return authn.FromConfig(authn.AuthConfig{Username: o.Auth.Username, Password: o.Auth.Password}), nil
}

// lookup is the credential for path in the Secret name of the release namespace.
func (c *secretCredentials) lookup(ctx context.Context, name, path string) (authn.Authenticator, error) {
	var s corev1.Secret
	if err := c.reader.Get(ctx, client.ObjectKey{Namespace: c.namespace, Name: name}, &s); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, &CredentialError{reason: v1alpha1.ReasonSecretNotFound, err: fmt.Errorf("secret %q not found in namespace %s", name, c.namespace)}
		}
		return nil, fmt.Errorf("reading secret %q: %w", name, err)
	}
	config, err := credentials.ParseSecret(&s)
	switch {
	case errors.Is(err, credentials.ErrNotDockerConfig):
		return nil, &CredentialError{reason: v1alpha1.ReasonNotDockerConfig, err: err}
	case err != nil:
		return nil, &CredentialError{reason: v1alpha1.ReasonInvalidDockerConfig, err: err}
	}
	entry, _, err := config.Lookup(path)
	if err != nil {
		return nil, &CredentialError{reason: v1alpha1.ReasonNoCredentialForPath, err: fmt.Errorf("secret %q: %w", name, err)}
	}
	return authn.FromConfig(authn.AuthConfig{Username: entry.Username, Password: entry.Password}), nil
}
