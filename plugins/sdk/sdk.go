// Package sdk is what a Go status-callback plugin imports: write a type with
// one method, Deliver, and hand it to Serve.
//
//	type hook struct{}
//
//	func (hook) Deliver(ctx context.Context, e *sdk.Event) error {
//		log.Printf("%s is %s", e.MessageID, e.Outcome)
//		return nil // acknowledged; an error makes the relay try again
//	}
//
//	func main() { sdk.Serve(hook{}) }
package sdk

import (
	"context"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	pb "github.com/genropy/postino/plugins/proto"
)

// ProtocolVersion is the version of the plugin contract. The relay and a
// plugin of another version refuse each other at the handshake, with a
// message that names both versions.
const ProtocolVersion = 1

// PluginName is the name the relay dispenses the plugin by.
const PluginName = "callback"

// Handshake is go-plugin's handshake for Postino plugins: a binary started
// by hand, not by the relay, says so and exits.
func Handshake() plugin.HandshakeConfig {
	return plugin.HandshakeConfig{
		ProtocolVersion:  ProtocolVersion,
		MagicCookieKey:   "POSTINO_PLUGIN",
		MagicCookieValue: "status-callback-d9f2c4",
	}
}

// Callback is the one method a plugin writes: acknowledge the event by
// returning nil, or return an error to have it sent again later (with the
// same EventID).
type Callback interface {
	Deliver(ctx context.Context, e *Event) error
}

// Wants, when a Callback also implements it, lists the outcomes the plugin
// wants; without it, it gets all of them.
type Wants interface {
	Outcomes() []string
}

// Serve runs the plugin until the relay stops it.
func Serve(cb Callback) {
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: Handshake(),
		Plugins:         Plugins(cb),
		GRPCServer:      plugin.DefaultGRPCServer,
	})
}

// Plugins is go-plugin's plugin map: the relay passes a nil Callback.
func Plugins(cb Callback) map[string]plugin.Plugin {
	return map[string]plugin.Plugin{PluginName: &grpcPlugin{cb: cb}}
}

type grpcPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	cb Callback
}

func (p *grpcPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	pb.RegisterCallbackServer(s, &server{cb: p.cb})
	return nil
}

func (p *grpcPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return pb.NewCallbackClient(c), nil
}

type server struct {
	pb.UnimplementedCallbackServer
	cb Callback
}

func (s *server) Describe(context.Context, *pb.DescribeRequest) (*pb.DescribeResponse, error) {
	resp := &pb.DescribeResponse{}
	if w, ok := s.cb.(Wants); ok {
		resp.Outcomes = w.Outcomes()
	}
	return resp, nil
}

func (s *server) Deliver(ctx context.Context, e *pb.Event) (*pb.Ack, error) {
	if err := s.cb.Deliver(ctx, FromProto(e)); err != nil {
		return nil, err
	}
	return &pb.Ack{}, nil
}
