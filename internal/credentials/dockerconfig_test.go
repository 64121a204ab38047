package credentials

import (
	"encoding/base64"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func secret(typ corev1.SecretType, data map[string]string) *corev1.Secret {
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kuik-system", Name: "pull"},
		Type:       typ,
		Data:       map[string][]byte{},
	}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// parsed is what a DockerConfig exposes, for comparison.
type parsed struct {
	Entries     map[string]AuthEntry
	Undecodable []string // keys
}

func summarize(c *DockerConfig) parsed {
	p := parsed{Entries: c.Entries()}
	for _, u := range c.Undecodable() {
		p.Undecodable = append(p.Undecodable, u.Key)
	}
	return p
}

func TestParseSecret(t *testing.T) {
	tests := map[string]struct {
		secret  *corev1.Secret
		want    parsed
		wantErr error
	}{
		"dockerconfigjson": {
			secret: secret(corev1.SecretTypeDockerConfigJson, map[string]string{
				".dockerconfigjson": `{"auths":{"quay.io":{"auth":"` + b64("u:p") + `"}}}`,
			}),
			want: parsed{Entries: map[string]AuthEntry{"quay.io": {Username: "u", Password: "p"}}},
		},
		"legacy dockercfg is the bare auths map": {
			secret: secret(corev1.SecretTypeDockercfg, map[string]string{
				".dockercfg": `{"https://index.docker.io/v1/":{"auth":"` + b64("u:p") + `","email":"u@example.com"}}`,
			}),
			want: parsed{Entries: map[string]AuthEntry{"https://index.docker.io/v1/": {Username: "u", Password: "p"}}},
		},
		"legacy dockercfg reports undecodable entries": {
			secret: secret(corev1.SecretTypeDockercfg, map[string]string{
				".dockercfg": `{"quay.io":{"auth":"!"}}`,
			}),
			want: parsed{Entries: map[string]AuthEntry{}, Undecodable: []string{"quay.io"}},
		},
		"opaque secret": {
			secret:  secret(corev1.SecretTypeOpaque, map[string]string{".dockerconfigjson": `{"auths":{}}`}),
			wantErr: ErrNotDockerConfig,
		},
		"basic-auth secret": {
			secret:  secret(corev1.SecretTypeBasicAuth, map[string]string{"username": "u", "password": "p"}),
			wantErr: ErrNotDockerConfig,
		},
		"dockerconfigjson without its data key": {
			secret:  secret(corev1.SecretTypeDockerConfigJson, map[string]string{".dockercfg": `{}`}),
			wantErr: ErrNotDockerConfig,
		},
		"dockercfg without its data key": {
			secret:  secret(corev1.SecretTypeDockercfg, map[string]string{".dockerconfigjson": `{"auths":{}}`}),
			wantErr: ErrNotDockerConfig,
		},
		"empty data key": {
			secret:  secret(corev1.SecretTypeDockerConfigJson, map[string]string{".dockerconfigjson": ``}),
			wantErr: ErrNotDockerConfig,
		},
		"nil secret": {
			secret:  nil,
			wantErr: ErrNotDockerConfig,
		},
		"JSON that does not parse": {
			secret:  secret(corev1.SecretTypeDockerConfigJson, map[string]string{".dockerconfigjson": `{"auths":`}),
			wantErr: ErrInvalidDockerConfig,
		},
		"legacy JSON that does not parse": {
			secret:  secret(corev1.SecretTypeDockercfg, map[string]string{".dockercfg": `[]`}),
			wantErr: ErrInvalidDockerConfig,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c, err := ParseSecret(tc.secret)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("ParseSecret error = %v; want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseSecret: %v", err)
			}
			if diff := cmp.Diff(tc.want, summarize(c)); diff != "" {
				t.Errorf("ParseSecret (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParse(t *testing.T) {
	tests := map[string]struct {
		json    string
		want    parsed
		wantErr error
	}{
		"auth padded": {
			json: `{"auths":{"quay.io":{"auth":"dTpwdw=="}}}`,
			want: parsed{Entries: map[string]AuthEntry{"quay.io": {Username: "u", Password: "pw"}}},
		},
		"auth unpadded": {
			json: `{"auths":{"quay.io":{"auth":"dTpwdw"}}}`,
			want: parsed{Entries: map[string]AuthEntry{"quay.io": {Username: "u", Password: "pw"}}},
		},
		"auth padded with a trailing newline": {
			json: `{"auths":{"quay.io":{"auth":"dTpwdw==\n"}}}`,
			want: parsed{Entries: map[string]AuthEntry{"quay.io": {Username: "u", Password: "pw"}}},
		},
		"auth wrongly padded": {
			json: `{"auths":{"quay.io":{"auth":"dTpwdw="}}}`,
			want: parsed{Entries: map[string]AuthEntry{}, Undecodable: []string{"quay.io"}},
		},
		"auth not base64": {
			json: `{"auths":{"quay.io":{"auth":"%%%"},"ghcr.io":{"username":"u","password":"p"}}}`,
			want: parsed{Entries: map[string]AuthEntry{"ghcr.io": {Username: "u", Password: "p"}}, Undecodable: []string{"quay.io"}},
		},
		"auth without a colon": {
			json: `{"auths":{"quay.io":{"auth":"` + b64("token") + `"}}}`,
			want: parsed{Entries: map[string]AuthEntry{}, Undecodable: []string{"quay.io"}},
		},
		"entry that is not an object": {
			json: `{"auths":{"quay.io":"u:p"}}`,
			want: parsed{Entries: map[string]AuthEntry{}, Undecodable: []string{"quay.io"}},
		},
		"username that is not a string": {
			json: `{"auths":{"quay.io":{"username":1,"password":"p"}}}`,
			want: parsed{Entries: map[string]AuthEntry{}, Undecodable: []string{"quay.io"}},
		},
		"email that is not a string": {
			json: `{"auths":{"quay.io":{"username":"u","password":"p","email":false}}}`,
			want: parsed{Entries: map[string]AuthEntry{}, Undecodable: []string{"quay.io"}},
		},
		"other fields are ignored": {
			json: `{"auths":{"quay.io":{"username":"u","password":"p","identitytoken":"t","serveraddress":1}},"credsStore":"x"}`,
			want: parsed{Entries: map[string]AuthEntry{"quay.io": {Username: "u", Password: "p"}}},
		},
		"field names are case-insensitive": {
			json: `{"Auths":{"quay.io":{"AUTH":"` + b64("u:p") + `"}}}`,
			want: parsed{Entries: map[string]AuthEntry{"quay.io": {Username: "u", Password: "p"}}},
		},
		"repeated auths fields merge": {
			json: `{"auths":{"quay.io":{"auth":"` + b64("u:p") + `"}},"AUTHS":{"ghcr.io":{"auth":"` + b64("v:q") + `"}}}`,
			want: parsed{Entries: map[string]AuthEntry{
				"quay.io": {Username: "u", Password: "p"},
				"ghcr.io": {Username: "v", Password: "q"},
			}},
		},
		"duplicate key: last value wins, a hidden undecodable one is reported": {
			json: `{"auths":{"quay.io":{"auth":"!"},"quay.io":{"auth":"` + b64("u:p") + `"}}}`,
			want: parsed{Entries: map[string]AuthEntry{"quay.io": {Username: "u", Password: "p"}}, Undecodable: []string{"quay.io"}},
		},
		"empty entries are no credential": {
			json: `{"auths":{"quay.io":{},"ghcr.io":null,"docker.io":{"password":"p"},"gcr.io":{"auth":"` + b64(":p") + `"}}}`,
			want: parsed{Entries: map[string]AuthEntry{}},
		},
		"null document": {
			json: `null`,
			want: parsed{Entries: map[string]AuthEntry{}},
		},
		"null auths": {
			json: `{"auths":null}`,
			want: parsed{Entries: map[string]AuthEntry{}},
		},
		"no auths": {
			json: `{}`,
			want: parsed{Entries: map[string]AuthEntry{}},
		},
		"not JSON": {
			json:    `auths`,
			wantErr: ErrInvalidDockerConfig,
		},
		"trailing data": {
			json:    `{"auths":{}} {}`,
			wantErr: ErrInvalidDockerConfig,
		},
		"document that is not an object": {
			json:    `["auths"]`,
			wantErr: ErrInvalidDockerConfig,
		},
		"auths that is not an object": {
			json:    `{"auths":["quay.io"]}`,
			wantErr: ErrInvalidDockerConfig,
		},
		"HttpHeaders that are not a string map, refused by the kubelet": {
			json:    `{"auths":{},"HttpHeaders":{"X-Meta":1}}`,
			wantErr: ErrInvalidDockerConfig,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c, err := Parse([]byte(tc.json))
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Parse error = %v; want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if diff := cmp.Diff(tc.want, summarize(c)); diff != "" {
				t.Errorf("Parse (-want +got):\n%s", diff)
			}
			for _, u := range c.Undecodable() {
				if !errors.Is(u.Err, ErrUndecodableEntry) {
					t.Errorf("undecodable %q: error %v does not wrap ErrUndecodableEntry", u.Key, u.Err)
				}
			}
		})
	}
}

func TestEncode(t *testing.T) {
	tests := map[string]struct {
		auths map[string]AuthEntry
		want  string
	}{
		"empty map": {
			auths: map[string]AuthEntry{},
			want:  `{"auths":{}}`,
		},
		"nil map": {
			auths: nil,
			want:  `{"auths":{}}`,
		},
		"keys sorted, fields in order": {
			auths: map[string]AuthEntry{
				"quay.io/acme/":       {Username: "u", Password: "p"},
				"docker.io/library/a": {Username: "robot$x", Password: ""},
				"registry.tld/mirror": {Username: "v", Password: "p:q"},
			},
			want: `{"auths":{` +
				`"docker.io/library/a":{"username":"robot$x","password":"","auth":"` + b64("robot$x:") + `"},` +
				`"quay.io/acme/":{"username":"u","password":"p","auth":"` + b64("u:p") + `"},` +
				`"registry.tld/mirror":{"username":"v","password":"p:q","auth":"` + b64("v:p:q") + `"}}}`,
		},
		"username with a colon is written without auth": {
			auths: map[string]AuthEntry{"quay.io": {Username: "a:b", Password: "p"}},
			want:  `{"auths":{"quay.io":{"username":"a:b","password":"p"}}}`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := Encode(tc.auths)
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}
			if diff := cmp.Diff(tc.want, string(got)); diff != "" {
				t.Errorf("Encode (-want +got):\n%s", diff)
			}
			for range 5 {
				again, err := Encode(tc.auths)
				if err != nil || string(again) != string(got) {
					t.Fatalf("Encode is not deterministic: %s, then %s (%v)", got, again, err)
				}
			}
			c, err := Parse(got)
			if err != nil {
				t.Fatalf("Parse(Encode): %v", err)
			}
			want := tc.auths
			if want == nil {
				want = map[string]AuthEntry{}
			}
			if diff := cmp.Diff(parsed{Entries: want}, summarize(c)); diff != "" {
				t.Errorf("Parse(Encode) (-want +got):\n%s", diff)
			}
		})
	}
}

func TestEncodeRefuses(t *testing.T) {
	tests := map[string]map[string]AuthEntry{
		"empty username":                     {"quay.io": {Username: "", Password: "p"}},
		"key that is not UTF-8":              {"quay.io/\xff": {Username: "u", Password: "p"}},
		"colon username with a non UTF-8 pw": {"quay.io": {Username: "a:b", Password: "\xff"}},
	}
	for name, auths := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := Encode(auths); !errors.Is(err, ErrUnencodableEntry) {
				t.Errorf("Encode error = %v; want ErrUnencodableEntry", err)
			}
		})
	}
}

func TestEncodeNonUTF8PasswordTravelsInAuth(t *testing.T) {
	want := map[string]AuthEntry{"quay.io": {Username: "u", Password: "p\xff"}}
	b, err := Encode(want)
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	c, err := Parse(b)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if diff := cmp.Diff(want, c.Entries()); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
}
