"""What tailreplay knows of the text it sees without keeping it: token counts, a
prompt's token statistics, and the redaction of credentials and personal data."""
