// Package version is the release leasegate was built as, set at link time:
//
//	go build -ldflags "-X github.com/leasegate/leasegate/internal/version.Version=v0.2.0"
package version

// Version is the release tag; images are tagged with it, so the default agent image matches the webhook.
var Version = "v0.1.0"
