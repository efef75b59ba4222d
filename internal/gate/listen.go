package gate

import "net"

// Listen listens on the TCP address for the gate's clients, whose connections read and write directly
// (directConn on Linux).
func Listen(address string) (net.Listener, error) {
	l, err := net.Listen("tcp", address)
	if err != nil {
		return nil, err
	}
	return directListener{l}, nil
}

type directListener struct{ net.Listener }

func (l directListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return direct(c), nil
}
