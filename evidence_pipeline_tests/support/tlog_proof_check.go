// The independent check of a c2sp.org/tlog-proof@v1 file (test_witness.py): Go's golang.org/x/mod/sumdb/note
// opens its checkpoint with the log's vkey and sumdb/tlog checks the inclusion of the event's bytes.
// Usage: check PROOF LOG_VKEY EVENT_FILE

package main

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

func main() {
	proof, _ := os.ReadFile(os.Args[1])
	event, _ := os.ReadFile(os.Args[3])
	head, signed, found := bytes.Cut(proof, []byte("\n\n"))
	lines := strings.Split(string(head), "\n")
	if !found || lines[0] != "c2sp.org/tlog-proof@v1" || !strings.HasPrefix(lines[1], "index ") {
		fmt.Println("not a tlog-proof")
		os.Exit(1)
	}
	index, _ := strconv.ParseInt(strings.TrimPrefix(lines[1], "index "), 10, 64)
	var hashes tlog.RecordProof
	for _, line := range lines[2:] {
		raw, _ := base64.StdEncoding.DecodeString(line)
		var h tlog.Hash
		copy(h[:], raw)
		hashes = append(hashes, h)
	}
	verifier, err := note.NewVerifier(os.Args[2])
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	n, err := note.Open(signed, note.VerifierList(verifier))
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	body := strings.Split(n.Text, "\n")
	size, _ := strconv.ParseInt(body[1], 10, 64)
	raw, _ := base64.StdEncoding.DecodeString(body[2])
	var root tlog.Hash
	copy(root[:], raw)
	if body[0] != verifier.Name() {
		fmt.Println("another origin")
		os.Exit(1)
	}
	if err := tlog.CheckRecord(hashes, size, root, index, tlog.RecordHash(event)); err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	fmt.Printf("ok %d %d\n", index, size)
}
