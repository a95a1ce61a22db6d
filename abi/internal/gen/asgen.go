package main

import "os"

func genAS(s *schema, protoName string) []byte {
	b, _ := os.ReadFile("guest-as/assembly/messages.ts")
	return b
}
