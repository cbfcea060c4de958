-- The schema of a SQLite database made by the released code's own migrations 001 to 011
-- (sqlite-utils, as sqlite_master keeps it), with its _migrations rows: upgrades start from it.

CREATE TABLE "_migrations" (
   "name" TEXT PRIMARY KEY,
   "applied_at" REAL
);
CREATE TABLE "keys" (
   "id" TEXT PRIMARY KEY,
   "key_hash" TEXT NOT NULL,
   "org" TEXT NOT NULL,
   "user" TEXT,
   "kind" TEXT NOT NULL,
   "created_at" REAL NOT NULL,
   "revoked_at" REAL
);
CREATE UNIQUE INDEX "idx_keys_key_hash"
    ON "keys" ("key_hash");
CREATE TABLE "meta" (
   "name" TEXT PRIMARY KEY,
   "value" INTEGER
);
CREATE TABLE "policy_layers" (
   "org" TEXT,
   "user" TEXT,
   "fields" TEXT NOT NULL,
   "updated_at" REAL NOT NULL,
   PRIMARY KEY ("org", "user")
);
CREATE TABLE "spills" (
   "conversation" TEXT,
   "id" TEXT,
   "tool_name" TEXT,
   "tool_call_id" TEXT,
   "content" TEXT NOT NULL,
   "tokens" INTEGER,
   "created_at" REAL,
   "expires_at" REAL NOT NULL,
   PRIMARY KEY ("conversation", "id")
);
CREATE INDEX "idx_spills_expires_at"
    ON "spills" ("expires_at");
CREATE TABLE "conversations" (
   "id" TEXT PRIMARY KEY,
   "org" TEXT NOT NULL,
   "created_at" REAL NOT NULL,
   "updated_at" REAL,
   "usage_prompt_tokens" INTEGER,
   "usage_estimate" INTEGER
, "public_id" TEXT, "last_tokens_before" INTEGER, "last_tokens_after" INTEGER);
CREATE TABLE "compactions" (
   "id" TEXT PRIMARY KEY,
   "conversation" TEXT NOT NULL,
   "seq" INTEGER NOT NULL,
   "created_at" REAL,
   "kind" TEXT NOT NULL,
   "prefix_hash" TEXT NOT NULL,
   "covered" INTEGER NOT NULL,
   "preserved" TEXT,
   "summary" TEXT NOT NULL,
   "summary_model" TEXT,
   "summary_tokens" INTEGER,
   "tokens_before" INTEGER,
   "tokens_after" INTEGER,
   "status" TEXT
, "truncated" INTEGER NOT NULL DEFAULT 0);
CREATE UNIQUE INDEX "idx_compactions_conversation_seq"
    ON "compactions" ("conversation", "seq");
CREATE TABLE "usage_totals" (
   "conversation" TEXT,
   "model" TEXT,
   "requests" INTEGER DEFAULT 0,
   "prompt_tokens" INTEGER DEFAULT 0,
   "cached_tokens" INTEGER DEFAULT 0,
   "summary_calls" INTEGER DEFAULT 0,
   "summary_prompt_tokens" INTEGER DEFAULT 0,
   "summary_cached_tokens" INTEGER DEFAULT 0,
   "updated_at" REAL, "cache_write_tokens" INTEGER NOT NULL DEFAULT 0, "summary_cache_write_tokens" INTEGER NOT NULL DEFAULT 0, "cost_spent_usd" REAL NOT NULL DEFAULT 0, "cost_without_usd" REAL NOT NULL DEFAULT 0,
   PRIMARY KEY ("conversation", "model")
);
CREATE TABLE "usage_hourly" (
   "org" TEXT NOT NULL,
   "user" TEXT NOT NULL,
   "hour" INTEGER NOT NULL,
   "requests" INTEGER DEFAULT 0,
   "tokens_received" INTEGER DEFAULT 0,
   "tokens_sent" INTEGER DEFAULT 0,
   "prompt_tokens" INTEGER DEFAULT 0,
   "cached_tokens" INTEGER DEFAULT 0,
   "outcome_auto" INTEGER DEFAULT 0,
   "outcome_manual" INTEGER DEFAULT 0,
   "outcome_reused" INTEGER DEFAULT 0,
   "outcome_failed" INTEGER DEFAULT 0,
   "outcome_insufficient" INTEGER DEFAULT 0, "cache_write_tokens" INTEGER NOT NULL DEFAULT 0, "cost_spent_usd" REAL NOT NULL DEFAULT 0, "cost_without_usd" REAL NOT NULL DEFAULT 0,
   PRIMARY KEY ("org", "user", "hour")
);
CREATE INDEX "idx_usage_hourly_hour"
    ON "usage_hourly" ("hour");
CREATE INDEX "idx_conversations_org_updated_at"
    ON "conversations" ("org", "updated_at");
CREATE TABLE "leases" (
   "name" TEXT PRIMARY KEY,
   "owner" TEXT NOT NULL,
   "expires_at" REAL NOT NULL
);
CREATE TABLE "learned_windows" (
   "model" TEXT PRIMARY KEY,
   "tokens" INTEGER NOT NULL,
   "learned_at" REAL
);
CREATE TABLE "console_signouts" (
   "nonce" TEXT PRIMARY KEY,
   "expires_at" REAL NOT NULL
);
CREATE INDEX "idx_console_signouts_expires_at"
    ON "console_signouts" ("expires_at");
CREATE TABLE "prepared_summaries" (
   "conversation" TEXT PRIMARY KEY,
   "prefix_hash" TEXT NOT NULL,
   "covered" INTEGER NOT NULL,
   "preserved" TEXT NOT NULL,
   "summary" TEXT NOT NULL,
   "summary_model" TEXT,
   "summary_tokens" INTEGER,
   "truncated" INTEGER,
   "created_at" REAL
);
INSERT INTO meta (name, value) VALUES ('keys_version', 0);
INSERT INTO meta (name, value) VALUES ('signouts_version', 0);
INSERT INTO _migrations (name, applied_at) VALUES ('001_keys', 1700000000.0);
INSERT INTO _migrations (name, applied_at) VALUES ('002_policy_layers', 1700000000.0);
INSERT INTO _migrations (name, applied_at) VALUES ('003_conversations', 1700000000.0);
INSERT INTO _migrations (name, applied_at) VALUES ('004_drop_unused_columns', 1700000000.0);
INSERT INTO _migrations (name, applied_at) VALUES ('005_usage_totals', 1700000000.0);
INSERT INTO _migrations (name, applied_at) VALUES ('006_truncated_summaries', 1700000000.0);
INSERT INTO _migrations (name, applied_at) VALUES ('007_usage_hourly', 1700000000.0);
INSERT INTO _migrations (name, applied_at) VALUES ('008_leases', 1700000000.0);
INSERT INTO _migrations (name, applied_at) VALUES ('009_console_signouts', 1700000000.0);
INSERT INTO _migrations (name, applied_at) VALUES ('010_costs', 1700000000.0);
INSERT INTO _migrations (name, applied_at) VALUES ('011_prepared_summaries', 1700000000.0);
