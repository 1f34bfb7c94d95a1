package cri

import (
	"sync"

	"google.golang.org/grpc"
)

// ConnPool lets the runtime and image clients of one socket share a gRPC connection
// (see WithConnPool). Upstream's kubelet dials each service separately; with one socket
// that means two connections that reconnect on their own back-off after a runtime
// restart, so the image client can still fail with the last dial error for up to
// maxBackoffDelay after the runtime service has answered again — long enough to make
// one restart look like two outages. Sharing the connection makes "the runtime
// answered" true of every client of that socket, and saves a socket and its buffers.
type ConnPool struct {
	mu    sync.Mutex
	conns map[string]*pooledConn
}

type pooledConn struct {
	conn *grpc.ClientConn
	refs int
}

// NewConnPool returns an empty pool.
func NewConnPool() *ConnPool {
	return &ConnPool{conns: map[string]*pooledConn{}}
}

// get returns the pool's connection to socket, dialling it with opts if there is none,
// and the function that gives it back; the last give-back closes it.
func (p *ConnPool) get(socket string, opts []grpc.DialOption) (*grpc.ClientConn, func() error, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pc := p.conns[socket]
	if pc == nil {
		conn, err := newConn(socket, opts...)
		if err != nil {
			return nil, nil, err
		}
		pc = &pooledConn{conn: conn}
		p.conns[socket] = pc
	}
	pc.refs++
	var once sync.Once
	release := func() error {
		var err error
		once.Do(func() { err = p.release(socket, pc) })
		return err
	}
	return pc.conn, release, nil
}

func (p *ConnPool) release(socket string, pc *pooledConn) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	pc.refs--
	if pc.refs > 0 {
		return nil
	}
	if p.conns[socket] == pc {
		delete(p.conns, socket)
	}
	return pc.conn.Close()
}
