-- The schema of a PostgreSQL database made by the released code's own migrations 001 to 003
-- (their statements, as written), with its _migrations rows: upgrades start from it.

CREATE TABLE _migrations (name text PRIMARY KEY, applied_at double precision);
CREATE TABLE keys (id text PRIMARY KEY, key_hash text NOT NULL, org text NOT NULL, "user" text, kind text NOT NULL, created_at double precision NOT NULL, revoked_at double precision);
CREATE UNIQUE INDEX idx_keys_key_hash ON keys (key_hash);
CREATE TABLE meta (name text PRIMARY KEY, value bigint);
INSERT INTO meta (name, value) VALUES ('keys_version', 0);
INSERT INTO _migrations (name, applied_at) VALUES ('001_keys', 1700000000.0);
CREATE TABLE policy_layers (org text, "user" text, fields text NOT NULL, updated_at double precision NOT NULL, PRIMARY KEY (org, "user"));
INSERT INTO _migrations (name, applied_at) VALUES ('002_policy_layers', 1700000000.0);
CREATE TABLE conversations (id text PRIMARY KEY, org text NOT NULL, created_at double precision NOT NULL, updated_at double precision, usage_prompt_tokens bigint, usage_estimate bigint, usage_messages bigint);
CREATE TABLE compactions (id text PRIMARY KEY, conversation text NOT NULL, seq bigint NOT NULL, created_at double precision, kind text NOT NULL, text text, prefix_hash text NOT NULL, covered bigint NOT NULL, preserved text, summary text NOT NULL, summary_model text, summary_tokens bigint, tokens_before bigint, tokens_after bigint, status text);
CREATE UNIQUE INDEX idx_compactions_conversation_seq ON compactions (conversation, seq);
CREATE TABLE spills (conversation text, id text, tool_name text, tool_call_id text, content text NOT NULL, tokens bigint, created_at double precision, expires_at double precision NOT NULL, PRIMARY KEY (conversation, id));
CREATE INDEX idx_spills_expires_at ON spills (expires_at);
INSERT INTO _migrations (name, applied_at) VALUES ('003_conversations', 1700000000.0);
