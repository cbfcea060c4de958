-- The schema of a SQLite database made by the released code's own migrations 001 to 003
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
CREATE TABLE "conversations" (
   "id" TEXT PRIMARY KEY,
   "org" TEXT NOT NULL,
   "created_at" REAL NOT NULL,
   "updated_at" REAL,
   "usage_prompt_tokens" INTEGER,
   "usage_estimate" INTEGER,
   "usage_messages" INTEGER
);
CREATE TABLE "compactions" (
   "id" TEXT PRIMARY KEY,
   "conversation" TEXT NOT NULL,
   "seq" INTEGER NOT NULL,
   "created_at" REAL,
   "kind" TEXT NOT NULL,
   "text" TEXT,
   "prefix_hash" TEXT NOT NULL,
   "covered" INTEGER NOT NULL,
   "preserved" TEXT,
   "summary" TEXT NOT NULL,
   "summary_model" TEXT,
   "summary_tokens" INTEGER,
   "tokens_before" INTEGER,
   "tokens_after" INTEGER,
   "status" TEXT
);
CREATE UNIQUE INDEX "idx_compactions_conversation_seq"
    ON "compactions" ("conversation", "seq");
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
INSERT INTO meta (name, value) VALUES ('keys_version', 0);
INSERT INTO _migrations (name, applied_at) VALUES ('001_keys', 1700000000.0);
INSERT INTO _migrations (name, applied_at) VALUES ('002_policy_layers', 1700000000.0);
INSERT INTO _migrations (name, applied_at) VALUES ('003_conversations', 1700000000.0);
