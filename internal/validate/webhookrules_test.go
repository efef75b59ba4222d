package validate

import (
	"encoding/json"
	"testing"

	"github.com/leasegate/leasegate/internal/config"
)

func TestRulesMergeGuardsByGroupAndOperations(t *testing.T) {
	cfg, err := config.Load([]byte(testConfig))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Guards = append(cfg.Guards, config.Guard{Name: "more-apps", Lease: "orders", Resources: []config.GuardedResource{
		{Group: "apps", Resources: []string{"statefulsets", "deployments"}, Operations: []string{"UPDATE", "CREATE", "DELETE"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.Marshal(Rules(cfg))
	if err != nil {
		t.Fatal(err)
	}
	want := `[` +
		`{"operations":["CREATE","DELETE","UPDATE"],"apiGroups":[""],"apiVersions":["*"],"resources":["secrets","services"],"scope":"*"},` +
		`{"operations":["UPDATE"],"apiGroups":[""],"apiVersions":["*"],"resources":["configmaps"],"scope":"*"},` +
		`{"operations":["CREATE","DELETE","UPDATE"],"apiGroups":["apps"],"apiVersions":["*"],"resources":["deployments","statefulsets"],"scope":"*"},` +
		`{"operations":["CREATE","DELETE","UPDATE"],"apiGroups":["batch"],"apiVersions":["*"],"resources":["jobs"],"scope":"*"}]`
	if string(got) != want {
		t.Errorf("Rules() =\n%s\nwant\n%s", got, want)
	}
}

func TestMatchConditionsLetOnlyGatedRequestersThrough(t *testing.T) {
	cfg, err := config.Load([]byte(testConfig))
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.Marshal(MatchConditions(cfg, "leasegate-system"))
	if err != nil {
		t.Fatal(err)
	}
	want := `[` +
		`{"name":"service-accounts","expression":"request.userInfo.username.startsWith(\"system:serviceaccount:\")"},` +
		`{"name":"not-leasegate","expression":"!request.userInfo.username.startsWith(\"system:serviceaccount:leasegate-system:\")"},` +
		`{"name":"not-exempt-users","expression":"!(request.userInfo.username in [\"ci-bot\"])"},` +
		`{"name":"not-exempt-groups","expression":"!request.userInfo.groups.exists(g, g in [\"system:masters\"])"}]`
	if string(got) != want {
		t.Errorf("MatchConditions() =\n%s\nwant\n%s", got, want)
	}
}
