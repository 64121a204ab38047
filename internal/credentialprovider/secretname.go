package credentialprovider

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/enix/kuik/pkg/apis/kuik/v1alpha1"
)

// SecretName is the kuik-provider-* Secret in the cluster resource namespace where the
// secret-syncer keeps the credentials a provider gave (for one ServiceAccount, when sa is set):
// kuik-provider-<provider lower-cased, reduced to DNS-1123 characters, cut>-<8 hex digits of a
// hash of the provider name and the ServiceAccount's namespace/name>.
func SecretName(provider string, sa *v1alpha1.ServiceAccountReference) string {
	h := sha256.New()
	h.Write([]byte(provider))
	if sa != nil {
		h.Write([]byte{0})
		h.Write([]byte(sa.Namespace + "/" + sa.Name))
	}
	sum := hex.EncodeToString(h.Sum(nil))[:8]
	var b strings.Builder
	for _, r := range strings.ToLower(provider) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		case b.Len() > 0 && !strings.HasSuffix(b.String(), "-"):
			b.WriteByte('-')
		}
	}
	// kuik-provider- (14) + 40 + - + 8 stays well under 63, so the name is also a valid label value.
	base := strings.Trim(b.String(), "-")
	if len(base) > 40 {
		base = strings.TrimRight(base[:40], "-")
	}
	if base == "" {
		return v1alpha1.ProviderSecretPrefix + sum
	}
	return v1alpha1.ProviderSecretPrefix + base + "-" + sum
}
