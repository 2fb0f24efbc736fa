-- The token that minted a token (NULL for tokens made with `temper hub user add`): revoking a
-- token revokes every token it minted, and theirs.
ALTER TABLE tokens ADD COLUMN parent_id TEXT;
