// rk-kv: a minimal key-value chaincode run as a service (chaincode-as-a-service) for researchkit's ledger layer.
// The peer reaches it at CHAINCODE_SERVER_ADDRESS (the external builder's connection.json); CHAINCODE_ID is the
// package id the peer assigned. Functions: put KEY VALUE, get KEY. Built by tools/install-go-tools (a `local` line).
package main

import (
	"fmt"
	"os"

	"github.com/hyperledger/fabric-chaincode-go/v2/shim"
	pb "github.com/hyperledger/fabric-protos-go-apiv2/peer"
)

type kv struct{}

func (kv) Init(stub shim.ChaincodeStubInterface) *pb.Response { return shim.Success(nil) }

func (kv) Invoke(stub shim.ChaincodeStubInterface) *pb.Response {
	fn, args := stub.GetFunctionAndParameters()
	switch fn {
	case "put":
		if len(args) != 2 {
			return shim.Error("put KEY VALUE")
		}
		if err := stub.PutState(args[0], []byte(args[1])); err != nil {
			return shim.Error(err.Error())
		}
		return shim.Success(nil)
	case "get":
		if len(args) != 1 {
			return shim.Error("get KEY")
		}
		v, err := stub.GetState(args[0])
		if err != nil {
			return shim.Error(err.Error())
		}
		return shim.Success(v)
	}
	return shim.Error("unknown function " + fn)
}

func main() {
	id, addr := os.Getenv("CHAINCODE_ID"), os.Getenv("CHAINCODE_SERVER_ADDRESS")
	if id == "" || addr == "" {
		fmt.Fprintln(os.Stderr, "rk-kv: set CHAINCODE_ID (the package id) and CHAINCODE_SERVER_ADDRESS (host:port to listen on)")
		os.Exit(2)
	}
	s := &shim.ChaincodeServer{CCID: id, Address: addr, CC: kv{}, TLSProps: shim.TLSProperties{Disabled: true}}
	if err := s.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
