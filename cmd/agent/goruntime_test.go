package main

import "testing"

func TestGoRuntimeFor(t *testing.T) {
	elector := goRuntime{procs: agentProcs, gcPercent: electorGCPercent, memoryLimit: electorMemoryLimit}
	for _, tc := range []struct {
		name       string
		env        map[string]string
		servesGate bool
		want       goRuntime
	}{
		{name: "an agent that only elects runs on one thread with a small heap", want: elector},
		{name: "an agent serving the gate runs on one thread and keeps the runtime's collector", servesGate: true, want: goRuntime{procs: agentProcs}},
		{name: "GOMAXPROCS set is the runtime's to read", env: map[string]string{"GOMAXPROCS": "4"},
			want: goRuntime{gcPercent: electorGCPercent, memoryLimit: electorMemoryLimit}},
		{name: "GOMAXPROCS set for the gate leaves nothing to set", env: map[string]string{"GOMAXPROCS": "2"}, servesGate: true},
		{name: "GOGC set keeps the memory limit", env: map[string]string{"GOGC": "100"},
			want: goRuntime{procs: agentProcs, memoryLimit: electorMemoryLimit}},
		{name: "GOMEMLIMIT set keeps the collection target", env: map[string]string{"GOMEMLIMIT": "64MiB"},
			want: goRuntime{procs: agentProcs, gcPercent: electorGCPercent}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := goRuntimeFor(func(k string) string { return tc.env[k] }, tc.servesGate); got != tc.want {
				t.Errorf("goRuntimeFor(%v, servesGate %t) = %+v, want %+v", tc.env, tc.servesGate, got, tc.want)
			}
		})
	}
}
