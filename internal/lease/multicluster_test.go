package lease

import "testing"

func TestConfirms(t *testing.T) {
	tests := []struct {
		name               string
		holder             string
		observed           int64
		generation         int64
		confirmed, decided bool
	}{
		{"an answer to this heartbeat naming the candidate", "a-0", 7, 7, true, true},
		{"an answer to a later heartbeat confirms this one too", "a-0", 8, 7, true, true},
		{"an answer to an earlier heartbeat decides nothing", "a-0", 6, 7, false, false},
		{"an answer naming another leader", "b-0", 7, 7, false, true},
		{"an answer naming no leader", "", 7, 7, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			confirmed, decided := Confirms(tt.holder, tt.observed, "a-0", tt.generation)
			if confirmed != tt.confirmed || decided != tt.decided {
				t.Errorf("Confirms() = %v, %v; want %v, %v", confirmed, decided, tt.confirmed, tt.decided)
			}
		})
	}
}
