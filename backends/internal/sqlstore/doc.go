// Package sqlstore is what the SQL stores (mysql, postgres) do alike
// beyond their statements: a transaction's rows held in memory and moved
// there (Rows), the group commit and the steps a transaction takes once it
// holds its rows (ApplyGroup, ClaimHeldEvents, …), the listings' cursor,
// the migrations' files. Each store keeps its statements and its driver's
// types; the contract every store meets is package backends.
package sqlstore
