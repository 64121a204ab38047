package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/enix/kuik/internal/testutil"
)

// Secret names.
const (
	secretCreds       = "creds"
	secretBig         = "big"
	secretUndecodable = "undecodable"
	secretGarbage     = "garbage"
)

var privateSecrets = []string{secretCreds, secretBig, secretUndecodable, secretGarbage}

// secrets creates the credentials the routing resources reference.
func (w *world) secrets(ctx context.Context) error {
	good := base64.StdEncoding.EncodeToString([]byte("puller:s3cret"))
	// ~1 MiB: thousands of entries, the registry's among them.
	auths := map[string]any{w.reg.Host: map[string]string{"auth": good}}
	pad := strings.Repeat("p", 120)
	for i := 0; ; i++ {
		auths[fmt.Sprintf("registry-%05d.example/team-%d/app", i, i%97)] = map[string]string{"auth": base64.StdEncoding.EncodeToString([]byte("user-" + fmt.Sprint(i) + ":" + pad))}
		if i%500 == 0 {
			if b, _ := json.Marshal(map[string]any{"auths": auths}); len(b) > 1_000_000 {
				break
			}
		}
	}
	big, err := json.Marshal(map[string]any{"auths": auths})
	if err != nil {
		return err
	}
	undecodable, err := json.Marshal(map[string]any{"auths": map[string]any{
		w.reg.Host + "/acme":   map[string]any{"auth": "!!! not base64 !!!"},
		w.reg.Host:             map[string]any{"auth": base64.StdEncoding.EncodeToString([]byte("no colon"))},
		w.reg.Host + "/other":  map[string]any{"auth": 42, "username": 7},
		"bad\xffutf8.example":  map[string]any{"auth": base64.StdEncoding.EncodeToString([]byte("\xff\xfe:\xc3\x28"))},
		"only-user.example":    map[string]any{"username": "u"},
		"ok.example/team/app":  map[string]any{"auth": good},
		"":                     map[string]any{"auth": good},
		"https://x/y?z=1#frag": map[string]any{"auth": good},
	}})
	if err != nil {
		return err
	}
	for _, s := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Name: secretCreds}, Type: corev1.SecretTypeDockerConfigJson, Data: map[string][]byte{corev1.DockerConfigJsonKey: testutil.DockerConfigJSON(map[string]string{w.reg.Host: "puller:s3cret"})}},
		{ObjectMeta: metav1.ObjectMeta{Name: secretBig}, Type: corev1.SecretTypeDockerConfigJson, Data: map[string][]byte{corev1.DockerConfigJsonKey: big}},
		{ObjectMeta: metav1.ObjectMeta{Name: secretUndecodable}, Type: corev1.SecretTypeDockerConfigJson, Data: map[string][]byte{corev1.DockerConfigJsonKey: undecodable}},
		// Not dockerconfigjson at all: an Opaque Secret whose key holds bytes that are no JSON.
		{ObjectMeta: metav1.ObjectMeta{Name: secretGarbage}, Type: corev1.SecretTypeOpaque, Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte("\xff\xfe{\"auths\":\x00")}},
	} {
		if _, err := w.cs.CoreV1().Secrets(crns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating Secret %s: %w", s.Name, err)
		}
	}
	fmt.Printf("secrets: %s (%d KiB, %d entries), %s, %s\n", secretBig, len(big)/1024, len(auths), secretUndecodable, secretGarbage)
	return nil
}
