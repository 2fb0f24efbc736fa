-- The hub's metadata. Portable SQL: the same file runs on SQLite and Postgres (booleans are
-- BIGINT 0/1, times are Unix seconds, lists are JSON text).
CREATE TABLE users (
    name TEXT PRIMARY KEY,
    created_at BIGINT NOT NULL
);

CREATE TABLE tokens (
    id TEXT PRIMARY KEY,
    user_name TEXT NOT NULL REFERENCES users (name),
    hash TEXT NOT NULL UNIQUE,
    scopes TEXT NOT NULL,
    label TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    revoked_at BIGINT
);

CREATE TABLE envs (
    owner TEXT NOT NULL REFERENCES users (name),
    name TEXT NOT NULL,
    private BIGINT NOT NULL,
    description TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (owner, name)
);

CREATE TABLE versions (
    owner TEXT NOT NULL,
    name TEXT NOT NULL,
    version TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    archive_key TEXT NOT NULL,
    archive_bytes BIGINT NOT NULL,
    files TEXT NOT NULL,
    readme TEXT NOT NULL,
    description TEXT NOT NULL,
    yanked BIGINT NOT NULL,
    published_at BIGINT NOT NULL,
    PRIMARY KEY (owner, name, version),
    FOREIGN KEY (owner, name) REFERENCES envs (owner, name)
);
