package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/leasegate/leasegate/test/framework/checkout"
	"github.com/leasegate/leasegate/test/framework/process"
)

// Addresses of the node. Everything stays on this machine: the bridge is the harness's own, pods get
// routes only to it and to the service range, the host routes the service range to the bridge, and
// nothing is masqueraded.
const (
	NodeName    = "leasegate-node"
	bridge      = "lc0"
	gateway     = "10.88.0.1"
	podCIDR     = "10.88.0.0/16"
	serviceCIDR = "10.96.0.0/16"
	serviceIP   = "10.96.0.1"
	apiPort     = 6443
)

// Node is a whole single-node cluster on this machine: etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler, containerd, kubelet and kube-proxy, each with its state under Dir.
type Node struct {
	Dir    string
	Config *rest.Config // system:masters
	Client kubernetes.Interface

	socket    string
	processes []*process.Process // in start order
	commands  [][]string         // each process's command line, to start it again
	// agents counts the processes started after containerd (kubelet, kube-proxy): stopped before it.
	agents int
	// stopped are the earlier runs of restarted components, whose logs Logs still shows.
	stopped []*process.Process
	// pauseImage is the sandbox image, PAUSE_IMAGE in hack/versions.env.
	pauseImage string
}

// StartNode brings the cluster up and waits until the node is Ready. binaries is the directory of the
// Kubernetes and etcd binaries (`make cluster-binaries`). Stop tears everything down, also after a failed
// start.
func StartNode(ctx context.Context, binaries string) (*Node, error) {
	clearStale()
	dir, err := os.MkdirTemp("", stateDirPrefix)
	if err != nil {
		return nil, err
	}
	n := &Node{Dir: dir, socket: filepath.Join(dir, "containerd.sock")}
	if err := n.start(ctx, binaries); err != nil {
		logs := n.Logs()
		n.Stop()
		return nil, fmt.Errorf("%w\n%s", err, logs)
	}
	return n, nil
}

// stateDirPrefix names the nodes' state directories, under the temporary directory.
const stateDirPrefix = "leasegate-cluster-"

// clearStale removes what a run killed before its teardown left behind (processes, chains, the bridge,
// cgroups, mounts, state): the bridge's name and the ports are fixed, so the next start would fail.
func clearStale() {
	stale := &Node{Dir: filepath.Join(os.TempDir(), stateDirPrefix)}
	stale.Stop() // matches every node's directory by this prefix
	dirs, _ := filepath.Glob(stale.Dir + "*")
	for _, dir := range dirs {
		_ = os.RemoveAll(dir)
	}
}

// start brings the components up in dependency order and waits until the node is Ready.
func (n *Node) start(ctx context.Context, binaries string) error {
	var err error
	if n.pauseImage, err = pinnedPauseImage(); err != nil {
		return err
	}
	if err := n.prepareState(); err != nil {
		return err
	}
	if err := addBridge(); err != nil {
		return err
	}
	if err := n.startEtcd(binaries); err != nil {
		return err
	}
	if err := n.startAPIServer(ctx, binaries); err != nil {
		return err
	}
	if err := n.startControllerManager(binaries); err != nil {
		return err
	}
	if err := n.startScheduler(binaries); err != nil {
		return err
	}
	if err := n.startContainerd(ctx); err != nil {
		return err
	}
	if err := n.importPause(); err != nil {
		return err
	}
	// kubelet and kube-proxy are the agents, which Stop ends before containerd.
	started := len(n.processes)
	defer func() { n.agents = len(n.processes) - started }()
	if err := n.startKubelet(binaries); err != nil {
		return err
	}
	if err := n.startKubeProxy(binaries); err != nil {
		return err
	}
	return n.waitReady(ctx)
}

// pinnedPauseImage is the sandbox image's reference, PAUSE_IMAGE in hack/versions.env.
func pinnedPauseImage() (string, error) {
	versions, err := checkout.PinnedVersions()
	if err != nil {
		return "", err
	}
	image := versions["PAUSE_IMAGE"]
	if image == "" {
		return "", errors.New("hack/versions.env has no PAUSE_IMAGE")
	}
	return image, nil
}

// path names a file or directory in the node's state directory.
func (n *Node) path(parts ...string) string {
	return filepath.Join(append([]string{n.Dir}, parts...)...)
}

// prepareState creates the components' state directories, the PKI, and their tokens and kubeconfigs.
func (n *Node) prepareState() error {
	for _, d := range []string{"etcd", "containerd/root", "containerd/state", "cni", "cni-ipam", "kubelet", "pod-logs"} {
		if err := os.MkdirAll(n.path(d), 0o755); err != nil {
			return err
		}
	}
	if err := pki(n.Dir, []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(gateway), net.ParseIP(serviceIP)},
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}); err != nil {
		return err
	}
	return n.writeTokens()
}

// writeTokens writes kube-apiserver's token file and a kubeconfig per user. Static tokens: no PKI
// toolchain needed for the components' identities.
func (n *Node) writeTokens() error {
	users := map[string]string{
		"admin":     `admin-token,admin,admin,"system:masters"`,
		"kubelet":   `kubelet-token,system:node:` + NodeName + `,kubelet,"system:nodes"`,
		"proxy":     `proxy-token,system:kube-proxy,kube-proxy`,
		"manager":   `manager-token,system:kube-controller-manager,kube-controller-manager`,
		"scheduler": `scheduler-token,system:kube-scheduler,kube-scheduler`,
	}
	var tokens []string
	for name, line := range users {
		tokens = append(tokens, line)
		if err := n.writeKubeconfig(n.path(name+".kubeconfig"), strings.Split(line, ",")[0]); err != nil {
			return err
		}
	}
	return os.WriteFile(n.path("tokens.csv"), []byte(strings.Join(tokens, "\n")+"\n"), 0o600)
}

// addBridge creates the pods' bridge, with the gateway address, and routes the service range to it.
func addBridge() error {
	for _, args := range [][]string{
		{"link", "add", bridge, "type", "bridge"},
		{"addr", "add", gateway + "/16", "dev", bridge},
		{"link", "set", bridge, "up"},
		// The host reaches Services through kube-proxy's DNAT; a ClusterIP it has not programmed yet must
		// not follow the host's default route off the machine: the service range goes to the bridge, where
		// nothing answers for an unprogrammed address. The route goes with the bridge at teardown.
		{"route", "add", serviceCIDR, "dev", bridge},
	} {
		if err := run("ip", args...); err != nil {
			return err
		}
	}
	return nil
}

// startEtcd starts etcd on loopback, without TLS.
func (n *Node) startEtcd(binaries string) error {
	return n.spawn(filepath.Join(binaries, "etcd"), "--data-dir", n.path("etcd"),
		"--listen-client-urls", "http://127.0.0.1:12379", "--advertise-client-urls", "http://127.0.0.1:12379",
		"--listen-peer-urls", "http://127.0.0.1:12380")
}

// startAPIServer starts kube-apiserver, sets n's admin client and waits until it answers.
func (n *Node) startAPIServer(ctx context.Context, binaries string) error {
	if err := n.spawn(filepath.Join(binaries, "kube-apiserver"), "--etcd-servers", "http://127.0.0.1:12379",
		"--secure-port", fmt.Sprint(apiPort), "--advertise-address", gateway,
		"--service-cluster-ip-range", serviceCIDR, "--allow-privileged=true",
		"--tls-cert-file", n.path("server.crt"), "--tls-private-key-file", n.path("server.key"),
		"--token-auth-file", n.path("tokens.csv"), "--authorization-mode", "Node,RBAC",
		"--service-account-issuer", "https://kubernetes.default.svc", "--service-account-key-file", n.path("sa.pub"),
		"--service-account-signing-key-file", n.path("sa.key"),
		// Webhooks are called at their endpoints (pod IPs on the bridge), not through cluster networking.
		"--enable-aggregator-routing=true", "--kubelet-preferred-address-types=InternalIP"); err != nil {
		return err
	}
	admin, err := clientcmd.BuildConfigFromFlags("", n.path("admin.kubeconfig"))
	if err != nil {
		return err
	}
	// The suite's bursts measure the API server and the webhooks, not client-go's default rate limit.
	admin.QPS, admin.Burst = 1000, 1000
	n.Config, n.Client = admin, kubernetes.NewForConfigOrDie(admin)
	if err := Poll(ctx, 60*time.Second, func() error {
		_, err := n.Client.Discovery().ServerVersion()
		return err
	}); err != nil {
		return fmt.Errorf("kube-apiserver did not come up: %w", err)
	}
	return nil
}

// startControllerManager starts kube-controller-manager.
func (n *Node) startControllerManager(binaries string) error {
	return n.spawn(filepath.Join(binaries, "kube-controller-manager"), "--kubeconfig", n.path("manager.kubeconfig"),
		"--service-account-private-key-file", n.path("sa.key"), "--root-ca-file", n.path("ca.crt"),
		"--controllers", "*,-nodeipam", "--leader-elect=false", "--use-service-account-credentials=true")
}

// startScheduler starts kube-scheduler.
func (n *Node) startScheduler(binaries string) error {
	return n.spawn(filepath.Join(binaries, "kube-scheduler"), "--kubeconfig", n.path("scheduler.kubeconfig"), "--leader-elect=false")
}

// startContainerd writes containerd's and CNI's configs, starts containerd and waits until it answers.
func (n *Node) startContainerd(ctx context.Context) error {
	config := n.nodeConfig()
	if err := writeConfig("containerd.toml", n.path("containerd.toml"), config); err != nil {
		return err
	}
	if err := writeConfig("10-leasegate.conflist", n.path("cni", "10-leasegate.conflist"), config); err != nil {
		return err
	}
	if err := n.spawn("containerd", "--config", n.path("containerd.toml")); err != nil {
		return err
	}
	if err := Poll(ctx, 30*time.Second, func() error { return n.ctr("version") }); err != nil {
		return fmt.Errorf("containerd did not come up: %w", err)
	}
	return nil
}

// startKubelet writes kubelet's config and starts it.
func (n *Node) startKubelet(binaries string) error {
	if err := writeConfig("kubelet.yaml", n.path("kubelet.yaml"), n.nodeConfig()); err != nil {
		return err
	}
	return n.spawn(filepath.Join(binaries, "kubelet"), "--kubeconfig", n.path("kubelet.kubeconfig"), "--config", n.path("kubelet.yaml"),
		"--root-dir", n.path("kubelet"), "--node-ip", gateway, "--hostname-override", NodeName)
}

// startKubeProxy starts kube-proxy in iptables mode.
func (n *Node) startKubeProxy(binaries string) error {
	return n.spawn(filepath.Join(binaries, "kube-proxy"), "--kubeconfig", n.path("proxy.kubeconfig"), "--proxy-mode", "iptables",
		"--hostname-override", NodeName, "--cluster-cidr", podCIDR, "--conntrack-max-per-core", "0")
}

// waitReady waits until the node is Ready and schedulable.
func (n *Node) waitReady(ctx context.Context) error {
	return Poll(ctx, 120*time.Second, func() error {
		node, err := n.Client.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		// Ready, and schedulable: the node lifecycle controller lifts its not-ready taint.
		if len(node.Spec.Taints) > 0 {
			return fmt.Errorf("node tainted %v", node.Spec.Taints)
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return errors.New("node not Ready")
	})
}

// importPause builds the sandbox image (containerd 1.6's default name) and imports it: nothing can be
// pulled here.
func (n *Node) importPause() error {
	binary, err := checkout.BuildBinary(n.Dir, "./test/framework/cluster/pause", "pause")
	if err != nil {
		return err
	}
	return n.Import(Image{Ref: n.pauseImage, Binary: binary})
}

// Import makes images available to the node's pods (with imagePullPolicy Never or IfNotPresent).
func (n *Node) Import(images ...Image) error {
	archive := filepath.Join(n.Dir, fmt.Sprintf("images-%d.tar", time.Now().UnixNano()))
	if err := WriteArchive(archive, images...); err != nil {
		return err
	}
	return n.ctr("images", "import", archive)
}

func (n *Node) ctr(args ...string) error {
	return run("ctr", append([]string{"--address", n.socket, "--namespace", "k8s.io"}, args...)...)
}

func (n *Node) spawn(binary string, args ...string) error {
	p, err := startCommand(binary, args)
	if err != nil {
		return err
	}
	n.processes = append(n.processes, p)
	n.commands = append(n.commands, append([]string{binary}, args...))
	return nil
}

func startCommand(binary string, args []string) (*process.Process, error) {
	cmd := exec.Command(binary, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return process.StartProcess(cmd)
}

// KillComponent kills a control-plane component by the name of its binary ("etcd", "kube-apiserver"),
// as a crash or a lost machine would: it stops answering at once (a SIGTERMed kube-apiserver goes on
// serving while it drains). StartComponent starts it again with the same command line, keeping its logs.
func (n *Node) KillComponent(name string) error {
	i, err := n.component(name)
	if err != nil {
		return err
	}
	n.processes[i].Stop()
	return nil
}

// StartComponent starts a component KillComponent stopped.
func (n *Node) StartComponent(name string) error {
	i, err := n.component(name)
	if err != nil {
		return err
	}
	select {
	case <-n.processes[i].Exited():
	default:
		return fmt.Errorf("%s is still running", name)
	}
	p, err := startCommand(n.commands[i][0], n.commands[i][1:])
	if err != nil {
		return err
	}
	n.stopped = append(n.stopped, n.processes[i])
	n.processes[i] = p
	return nil
}

func (n *Node) component(name string) (int, error) {
	for i, command := range n.commands {
		if filepath.Base(command[0]) == name {
			return i, nil
		}
	}
	return 0, fmt.Errorf("no component %q on this node", name)
}

// Logs returns every component's output, for a failed test's report.
func (n *Node) Logs() string {
	var b strings.Builder
	for _, p := range append(slices.Clone(n.stopped), n.processes...) {
		fmt.Fprintf(&b, "--- pid %d ---\n%s\n", p.Pid(), lastLines(p.Logs(), 40))
	}
	return b.String()
}

// Stop tears the cluster down and leaves the machine as it found it: containers, processes, kube-proxy's
// and kubelet's iptables chains, mounts, the bridge, cgroups and state.
func (n *Node) Stop() {
	// Kubelet first: it would restart every container killed next.
	for i := len(n.processes) - 1; i >= len(n.processes)-n.agents; i-- {
		n.processes[i].Terminate(10 * time.Second)
	}
	if n.socket != "" {
		if out, err := exec.Command("ctr", "--address", n.socket, "--namespace", "k8s.io", "tasks", "list", "-q").Output(); err == nil {
			for _, id := range strings.Fields(string(out)) {
				_ = n.Thaw(id) // a frozen task cannot die
				_ = n.ctr("tasks", "kill", "--signal", "SIGKILL", id)
				_ = n.ctr("tasks", "delete", "--force", id) // and its shim exits
			}
		}
	}
	for i := len(n.processes) - n.agents - 1; i >= 0; i-- {
		n.processes[i].Terminate(10 * time.Second)
	}
	n.killLeftovers()
	// kube-proxy's and kubelet's chains all start with KUBE-; dropping every line that names one and
	// restoring the rest removes them and the jumps to them, and nothing else.
	for _, tool := range []string{"iptables", "ip6tables"} {
		_ = run("sh", "-c", tool+"-save | grep -v -- KUBE- | "+tool+"-restore")
	}
	if out, err := os.ReadFile("/proc/mounts"); err == nil {
		lines := strings.Split(string(out), "\n")
		for i := len(lines) - 1; i >= 0; i-- {
			if fields := strings.Fields(lines[i]); len(fields) > 1 && strings.HasPrefix(fields[1], n.Dir) {
				_ = syscall.Unmount(fields[1], syscall.MNT_DETACH)
			}
		}
	}
	_ = run("ip", "link", "del", bridge)
	removeCgroups("/sys/fs/cgroup")
	_ = os.RemoveAll(n.Dir)
}

// killLeftovers kills what the runtime did not: a shim of this node's containerd (they outlive it by
// design) and any process still in kubelet's cgroups, thawing frozen ones first, and waits until they
// are gone so their cgroups can be removed.
func (n *Node) killLeftovers() {
	pids := processesMentioning(n.Dir)
	_ = filepath.WalkDir("/sys/fs/cgroup/freezer/kubepods", func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Name() == "freezer.state" {
			_ = os.WriteFile(p, []byte("THAWED"), 0o644)
		}
		return nil
	})
	_ = filepath.WalkDir("/sys/fs/cgroup/pids/kubepods", func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Name() == "cgroup.procs" {
			data, _ := os.ReadFile(p)
			for _, field := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(field); err == nil {
					pids = append(pids, pid)
				}
			}
		}
		return nil
	})
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for syscall.Kill(pid, 0) == nil && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// Leftovers lists what the node left on the machine after Stop: nothing, or the test fails.
func (n *Node) Leftovers() []string {
	var found []string
	for _, pid := range processesMentioning(n.Dir) {
		found = append(found, fmt.Sprintf("process %d", pid))
	}
	if _, err := os.Stat("/sys/class/net/" + bridge); err == nil {
		found = append(found, "bridge "+bridge)
	}
	if out, err := exec.Command("iptables-save").Output(); err == nil && strings.Contains(string(out), "KUBE-") {
		found = append(found, "KUBE- iptables chains")
	}
	cgroups, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods")
	found = append(found, cgroups...)
	if mounts, err := os.ReadFile("/proc/mounts"); err == nil && strings.Contains(string(mounts), n.Dir) {
		found = append(found, "mounts under "+n.Dir)
	}
	if _, err := os.Stat(n.Dir); err == nil {
		found = append(found, n.Dir)
	}
	return found
}

// processesMentioning are the processes with s in their command line: the node's components and
// containerd's shims all name the node's directory.
func processesMentioning(s string) []int {
	var pids []int
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if cmdline, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline")); err == nil && strings.Contains(string(cmdline), s) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// removeCgroups removes the kubepods hierarchies kubelet made, deepest first.
func removeCgroups(root string) {
	controllers, _ := os.ReadDir(root)
	for _, c := range controllers {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(root, c.Name(), "kubepods"), func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			_ = os.Remove(dirs[i])
		}
	}
}

func (n *Node) writeKubeconfig(file, token string) error {
	ca, err := os.ReadFile(filepath.Join(n.Dir, "ca.crt"))
	if err != nil {
		return err
	}
	config := clientcmdapi.NewConfig()
	config.Clusters["node"] = &clientcmdapi.Cluster{Server: fmt.Sprintf("https://127.0.0.1:%d", apiPort), CertificateAuthorityData: ca}
	config.AuthInfos["user"] = &clientcmdapi.AuthInfo{Token: token}
	config.Contexts["node"] = &clientcmdapi.Context{Cluster: "node", AuthInfo: "user"}
	config.CurrentContext = "node"
	return clientcmd.WriteToFile(*config, file)
}

func run(name string, args ...string) error {
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

// Poll calls check every 250 ms until it succeeds, and returns its last error after timeout.
func Poll(ctx context.Context, timeout time.Duration, check func() error) error {
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		if err = check(); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	return err
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
