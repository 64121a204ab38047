package routing

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

const (
	pullSecretPrefix = "kuik-inject-"
	// hashLen hex characters of sha256 keep names unique enough while leaving most of the
	// readable prefix in place.
	hashLen = 10
)

// PullSecretName is the name of the Secret holding the injected credentials of one resource,
// the same in every namespace: "kuik-inject-<kind>-<name>", kind lower-cased.
//
// A resource name may be up to 253 characters, so the full name may exceed what a Secret name
// allows; it is then cut and suffixed with a hash of the full name, which keeps it
// deterministic (the webhook and the syncer compute it apart) and distinct from the names of
// other resources sharing the same prefix.
func PullSecretName(kind Kind, name string) string {
	full := pullSecretPrefix + strings.ToLower(string(kind)) + "-" + name
	if len(full) <= validation.DNS1123SubdomainMaxLength {
		return full
	}
	sum := sha256.Sum256([]byte(full))
	// A cut may end on a '.' or '-', which would leave an empty or '-'-ended DNS label.
	cut := strings.TrimRight(full[:validation.DNS1123SubdomainMaxLength-1-hashLen], "-.")
	return cut + "-" + hex.EncodeToString(sum[:])[:hashLen]
}
