// Package grpcreflect serves gRPC server reflection from descriptors that
// keep the protos' comments.
package grpcreflect

import (
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/reflection"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionv1alphapb "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
)

// Register serves server reflection on s, v1 and v1alpha for older
// clients. It serves it from descriptors, a serialized FileDescriptorSet in
// dependency order that keeps the protos' comments. So `grpcurl describe`
// shows each field's documentation. The descriptors compiled into the
// generated code leave comments out, while daemon.Descriptors keeps
// them. Files the set does not hold (well-known types, grpc's own) come
// from the global registry.
func Register(s *grpc.Server, descriptors []byte) error {
	var set descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(descriptors, &set); err != nil {
		return fmt.Errorf("reflection descriptors: %w", err)
	}
	files := withFallback{new(protoregistry.Files)}
	for _, fdp := range set.File { // in dependency order, as buf writes them
		fd, err := protodesc.NewFile(fdp, files)
		if err == nil {
			err = files.own.RegisterFile(fd)
		}
		if err != nil {
			return fmt.Errorf("reflection descriptors: %w", err)
		}
	}
	opts := reflection.ServerOptions{
		Services:           s,
		DescriptorResolver: files,
		ExtensionResolver:  protoregistry.GlobalTypes,
	}
	reflectionpb.RegisterServerReflectionServer(s, reflection.NewServerV1(opts))
	reflectionv1alphapb.RegisterServerReflectionServer(s, reflection.NewServer(opts))
	return nil
}

// withFallback resolves from its own files first, then the global registry.
type withFallback struct{ own *protoregistry.Files }

func (r withFallback) FindFileByPath(path string) (protoreflect.FileDescriptor, error) {
	if fd, err := r.own.FindFileByPath(path); err == nil {
		return fd, nil
	}
	return protoregistry.GlobalFiles.FindFileByPath(path)
}

func (r withFallback) FindDescriptorByName(name protoreflect.FullName) (protoreflect.Descriptor, error) {
	if d, err := r.own.FindDescriptorByName(name); err == nil {
		return d, nil
	}
	return protoregistry.GlobalFiles.FindDescriptorByName(name)
}
