package credentialprovider

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/enix/kuik/internal/credentials"
	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// A kuik-provider-* Secret, the format the secret-syncer writes and the webhook, the keeper and
// the syncer's own restart read: a kubernetes.io/dockerconfigjson Secret whose auths hold the
// credentials plugins gave, and a [CredentialsKey] data key recording, for each auths key, the
// demand it was obtained for and its lifetime. What goes under which auths key is the syncer's
// layout (syncer.LayOutProviderSecret); a reader looks an image up with the keyring rules
// ([Stored]).

// SecretName is the kuik-provider-* Secret in the cluster resource namespace where the
// secret-syncer keeps the credentials a provider gave (for one ServiceAccount, when sa is set):
// kuik-provider-<provider lower-cased, reduced to DNS-1123 characters, cut>-<16 hex digits (64
// bits) of a hash of the provider name and the ServiceAccount's namespace/name>. The hash is long
// enough that no one can choose a ServiceAccount name whose Secret is another's (a 32-bit one
// can be found by brute force in minutes); the syncer also records, in each credential it keeps,
// the provider and ServiceAccount it was obtained for, and never reuses one for another.
func SecretName(provider string, sa *v1alpha1.ServiceAccountReference) string {
	h := sha256.New()
	h.Write([]byte(provider))
	if sa != nil {
		h.Write([]byte{0})
		h.Write([]byte(sa.Namespace + "/" + sa.Name))
	}
	sum := hex.EncodeToString(h.Sum(nil))[:16]
	var b strings.Builder
	for _, r := range strings.ToLower(provider) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		case b.Len() > 0 && !strings.HasSuffix(b.String(), "-"):
			b.WriteByte('-')
		}
	}
	// kuik-provider- (14) + 32 + - + 16 is 63 at most, so the name is also a valid label value.
	base := strings.Trim(b.String(), "-")
	if len(base) > 32 {
		base = strings.TrimRight(base[:32], "-")
	}
	if base == "" {
		return v1alpha1.ProviderSecretPrefix + sum
	}
	return v1alpha1.ProviderSecretPrefix + base + "-" + sum
}

// CredentialsKey is the data key of a kuik-provider-* Secret recording its credentials'
// lifetimes.
const CredentialsKey = "kuik-credentials.json"

// Obtained is a credential a plugin gave for a demand, with its lifetime as the secret-syncer
// keeps it; its JSON is the record of [CredentialsKey].
type Obtained struct {
	Auth credentials.AuthEntry `json:"-"`
	// Provider, ServiceAccount and Image are the demand it was obtained for: a restart reuses
	// it only for that very demand.
	Provider       string `json:"provider"`
	ServiceAccount string `json:"serviceAccount,omitempty"`
	Image          string `json:"image"`
	// CacheKeyType is the plugin's answer's (Image, Registry, Global); Scope is what the kubelet
	// would share that answer with ([CacheScope] of the demand's image: its registry host,
	// <global>, or "" for an Image answer, which serves its image only).
	CacheKeyType string `json:"cacheKeyType,omitempty"`
	Scope        string `json:"scope,omitempty"`
	// ResponseKey is the key of the plugin's auth map the credential came from (the auths key
	// it is kept under when its Scope is shared, see syncer.LayOutProviderSecret).
	ResponseKey string    `json:"-"`
	ObtainedAt  time.Time `json:"obtainedAt"`
	// RenewAt is when the syncer asks again; ExpiresAt is when it stops using the credential.
	RenewAt   time.Time `json:"renewAt"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// Valid reports whether the credential may still be used at now.
func (o *Obtained) Valid(now time.Time) bool { return o != nil && now.Before(o.ExpiresAt) }

// ServiceAccountKey is the ServiceAccount as an [Obtained] records it: "namespace/name", or ""
// for nil.
func ServiceAccountKey(sa *v1alpha1.ServiceAccountReference) string {
	if sa == nil {
		return ""
	}
	return sa.Namespace + "/" + sa.Name
}

// Secret is the kuik-provider-* Secret holding the valid credentials of one (provider,
// ServiceAccount) pair, by auths key.
func Secret(namespace, name string, creds map[string]*Obtained) (*corev1.Secret, error) {
	auths := make(map[string]credentials.AuthEntry, len(creds))
	for k, o := range creds {
		auths[k] = o.Auth
	}
	data, err := credentials.Encode(auths)
	if err != nil {
		return nil, fmt.Errorf("encoding provider secret %s: %w", name, err)
	}
	rec, err := json.Marshal(creds)
	if err != nil {
		return nil, fmt.Errorf("encoding provider secret %s: %w", name, err)
	}
	return &corev1.Secret{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: namespace,
			Labels:    map[string]string{v1alpha1.LabelManagedBy: v1alpha1.ManagedBySecretSyncer},
		},
		Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: data, CredentialsKey: rec},
	}, nil
}

// ParseSecret reads back what [Secret] wrote: the credentials by auths key. An entry whose
// record or credential is missing or does not parse is skipped.
func ParseSecret(s *corev1.Secret) map[string]*Obtained {
	var rec map[string]*Obtained
	if err := json.Unmarshal(s.Data[CredentialsKey], &rec); err != nil {
		return nil
	}
	cfg, err := credentials.ParseSecret(s)
	if err != nil {
		return nil
	}
	entries := cfg.Entries()
	out := map[string]*Obtained{}
	for _, k := range slices.Sorted(maps.Keys(rec)) {
		a, ok := entries[k]
		if !ok || rec[k] == nil || a.Username == "" {
			continue
		}
		o := *rec[k]
		o.Auth = a
		out[k] = &o
	}
	return out
}

// Stored is the credential image reads in s, the kuik-provider-* Secret of provider and sa
// ([SecretName]), and its auths key: the entry the keyring rules choose (credentials.Lookup,
// as the webhook and the kubelet read an auths map), with its record. nil when image reads no
// entry, or one recorded for another provider or ServiceAccount, or expired at now. The result
// is the caller's own copy.
func Stored(s *corev1.Secret, provider string, sa *v1alpha1.ServiceAccountReference, image string, now time.Time) (*Obtained, string) {
	cfg, err := credentials.ParseSecret(s)
	if err != nil {
		return nil, ""
	}
	_, key, err := cfg.Lookup(image)
	if err != nil {
		return nil, ""
	}
	o := ParseSecret(s)[key]
	if o == nil || o.Provider != provider || o.ServiceAccount != ServiceAccountKey(sa) || !o.Valid(now) {
		return nil, ""
	}
	return o, key
}
