package process

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// FreePort returns a loopback port that is free now, for a process to bind a moment later. It is chosen
// below the kernel's ephemeral range, so that an outgoing connection's port cannot take it in between:
// a port chosen inside that range, as envtest chooses its webhook port, can be taken that way.
func FreePort() (int, error) {
	low := 32768 // Linux's default start of net.ipv4.ip_local_port_range
	if data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if fields := strings.Fields(string(data)); len(fields) == 2 {
			if n, err := strconv.Atoi(fields[0]); err == nil && n > 20000 {
				low = n
			}
		}
	}
	for range 100 {
		port := 20000 + rand.IntN(low-20000)
		if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			return port, l.Close()
		}
	}
	return 0, errors.New("no free port below the ephemeral range after 100 tries")
}

// FreePorts is n distinct ports from FreePort, which picks them below the ephemeral range: a port the
// kernel handed out for 127.0.0.1:0 could be taken as an outgoing connection's source port (say, one etcd
// member dialing another) before the member meant to listen on it has started.
func FreePorts(n int) ([]int, error) {
	seen := map[int]bool{}
	var ports []int
	for len(ports) < n {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		if !seen[port] {
			seen[port] = true
			ports = append(ports, port)
		}
	}
	return ports, nil
}
