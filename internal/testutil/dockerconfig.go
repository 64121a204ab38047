package testutil

import (
	"strings"

	"github.com/enix/kuik/internal/credentials"
)

// DockerConfigJSON is a .dockerconfigjson document for auths key -> "user:password", as
// kuik itself encodes one. It panics on a credential credentials.Encode refuses (a test bug).
func DockerConfigJSON(auths map[string]string) []byte {
	entries := make(map[string]credentials.AuthEntry, len(auths))
	for key, userPass := range auths {
		user, pass, _ := strings.Cut(userPass, ":")
		entries[key] = credentials.AuthEntry{Username: user, Password: pass}
	}
	b, err := credentials.Encode(entries)
	if err != nil {
		panic(err)
	}
	return b
}
