package lease

import (
	"strings"
	"testing"
)

// The agent checks names as the API server does, without linking apimachinery's validation.
func TestDNS1123Names(t *testing.T) {
	tests := []struct {
		value            string
		label, subdomain bool
	}{
		{"orders", true, true},
		{"orders-2", true, true},
		{"0rders", true, true},
		{"shop.orders", false, true},
		{"", false, false},
		{"Orders", false, false},
		{"-orders", false, false},
		{"orders-", false, false},
		{"shop.-orders", false, false},
		{"shop-.orders", false, false},
		{"shop..orders", false, false},
		{".orders", false, false},
		{"orders.", false, false},
		{"or_ders", false, false},
		{strings.Repeat("a", 63), true, true},
		{strings.Repeat("a", 64), false, true},
		{strings.Repeat("a", 253), false, true},
		{strings.Repeat("a", 254), false, false},
	}
	for _, tt := range tests {
		if got := len(dns1123Label(tt.value)) == 0; got != tt.label {
			t.Errorf("%.20q a label: %v, want %v", tt.value, got, tt.label)
		}
		if got := len(dns1123Subdomain(tt.value)) == 0; got != tt.subdomain {
			t.Errorf("%.20q a subdomain: %v, want %v", tt.value, got, tt.subdomain)
		}
	}
}
