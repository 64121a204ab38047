package credentialprovider

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

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
