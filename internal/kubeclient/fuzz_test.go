package kubeclient

import (
	"strings"
	"testing"
)

// FuzzKubeconfig: whatever KUBECONFIG holds, the agent gets a config or an error that says what is wrong,
// never a panic, and never a config without a server to reach.
func FuzzKubeconfig(f *testing.F) {
	f.Add("apiVersion: v1\nkind: Config\ncurrent-context: c\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n" +
		"clusters: [{name: k, cluster: {server: 'https://127.0.0.1:6443', insecure-skip-tls-verify: true}}]\nusers: [{name: u, user: {token: abc}}]\n")
	f.Add("current-context: c\ncontexts: [{name: c, context: {cluster: k, user: u}}]\nclusters: [{name: k, cluster: {server: x}}]\nusers: [{name: u, user: {exec: {command: aws}}}]\n")
	f.Add("current-context: c\nclusters: [{name: k, cluster: {certificate-authority-data: '!!'}}]\n")
	f.Add("{}")
	f.Fuzz(func(t *testing.T, data string) {
		dir := t.TempDir() // relative paths resolve here, where there are no files
		config, err := parseKubeconfig([]byte(data), dir)
		if err != nil {
			if strings.TrimSpace(err.Error()) == "" {
				t.Fatal("an error that says nothing")
			}
			return
		}
		if config.Host == "" {
			t.Fatalf("a config without a server from %q", data)
		}
	})
}
