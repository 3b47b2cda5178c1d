package mysql

// MigrateTo lets tests make a database of an older schema.
var MigrateTo = migrateTo
