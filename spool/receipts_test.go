package spool_test

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/genropy/postino/spool"
)

func TestReceipts(t *testing.T) {
	s := openSpool(t)
	path := write(t, s, "pec-1", time.Now(), []byte("Subject: x\r\n\r\nx\r\n"))
	if got, err := s.Receipts(path); err != nil || len(got) != 0 {
		t.Fatalf("receipts of a message without any: %v %v", got, err)
	}
	for _, r := range []struct{ name, body string }{
		{"avvenuta-consegna-b.eml", "delivered to b"},
		{"accettazione-a.eml", "accepted"},
		{"accettazione-a.eml", "accepted"}, // read twice: kept once
	} {
		if err := s.SaveReceipt(path, r.name, []byte(r.body)); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Receipts(path)
	if err != nil || len(got) != 2 || got[0].Name != "accettazione-a.eml" || got[1].Size != int64(len("delivered to b")) {
		t.Fatalf("receipts %+v %v", got, err)
	}
	rf, err := s.OpenReceipt(path, "accettazione-a.eml")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rf)
	rf.Close()
	if string(b) != "accepted" {
		t.Errorf("receipt holds %q", b)
	}
	for _, bad := range []string{"", "../x.eml", "a/b.eml", ".hidden"} {
		if err := s.SaveReceipt(path, bad, nil); err == nil {
			t.Errorf("SaveReceipt(%q) was accepted", bad)
		}
		if _, err := s.OpenReceipt(path, bad); err == nil {
			t.Errorf("OpenReceipt(%q) was accepted", bad)
		}
	}
	// Walk sees the message, not its receipts.
	var walked []string
	s.Walk(func(e spool.Entry) error { walked = append(walked, e.ID); return nil })
	if strings.Join(walked, ",") != "pec-1" {
		t.Errorf("Walk found %v", walked)
	}
	// The receipts go with the message.
	if err := s.Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(s.Dir(), strings.TrimSuffix(path, ".eml")+".receipts")); !os.IsNotExist(err) {
		t.Errorf("receipts left after Remove: %v", err)
	}
}
