package postgres_test

import (
	"testing"

	"github.com/genropy/postino/backends/backendtest"
)

func TestReceiptsConformance(t *testing.T) {
	backendtest.RunReceipts(t, func(t *testing.T) backendtest.ReceiptStore { return openStore(t) })
}

func TestReceiptsChunked(t *testing.T) { backendtest.ReceiptsChunked(t, sqlStore(t)) }
