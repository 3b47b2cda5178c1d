package backends

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
)

// bodyPrefix marks an EmlPath whose bytes the store keeps, not a spool file.
const bodyPrefix = "outbox:"

// ErrBodiesNotKept is a store's answer to a Create with a Body when it keeps
// no message bytes.
var ErrBodiesNotKept = errors.New("this store does not keep message bytes: set spool.store to local or shared")

// BodyRef is the EmlPath of a message whose bytes the store keeps. The
// nonce tells two submissions of one id apart, as a spool file's name does,
// so that a store knows which of them made the row.
func BodyRef(id, nonce string) string { return bodyPrefix + id + "." + nonce }

// NonceLen is the length of a Nonce, in hex characters.
const NonceLen = 12

// Nonce tells apart two writes of bytes that would share a name: two
// submissions of one message id (a spool file's name or a BodyRef holds
// one), two copies of one receipt.
func Nonce() string {
	var nonce [NonceLen / 2]byte
	rand.Read(nonce[:])
	return hex.EncodeToString(nonce[:])
}

// BodyID returns the message id of a path made by BodyRef; ok is false for
// a spool file's path.
func BodyID(path string) (id string, ok bool) {
	ref, ok := strings.CutPrefix(path, bodyPrefix)
	if !ok {
		return "", false
	}
	i := strings.LastIndexByte(ref, '.')
	if i <= 0 {
		return "", false
	}
	return ref[:i], true
}
