package load

import (
	"errors"
	"slices"
	"sync/atomic"
	"testing"
)

func TestCounts(t *testing.T) {
	for _, tc := range []struct {
		list    string
		want    []int
		wantErr bool
	}{
		{"1000", []int{1000}, false},
		{"1000, 5000,10000", []int{1000, 5000, 10000}, false},
		{"1000,,5000", nil, true},
		{"0", nil, true},
		{"-5", nil, true},
		{"ten", nil, true},
	} {
		got, err := Counts(tc.list)
		if !slices.Equal(got, tc.want) || (err != nil) != tc.wantErr {
			t.Errorf("Counts(%q) = %v, %v; want %v, error %t", tc.list, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestInParallel(t *testing.T) {
	var calls atomic.Int64
	seen := make([]atomic.Bool, 100)
	boom := errors.New("boom")
	err := InParallel(len(seen), func(i int) error {
		calls.Add(1)
		seen[i].Store(true)
		if i == 42 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) {
		t.Errorf("InParallel returned %v, want the failing call's error", err)
	}
	if calls.Load() != int64(len(seen)) {
		t.Errorf("%d calls, want %d: a failure stops no other call", calls.Load(), len(seen))
	}
	for i := range seen {
		if !seen[i].Load() {
			t.Errorf("index %d never called", i)
		}
	}
}
