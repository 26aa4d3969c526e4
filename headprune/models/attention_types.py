"""The paper's three attention types and their labels, without torch (plotting and the scorecard read
them; ``headprune.models.heads`` gates them). BERT has only encoder self-attention; a decoder-only LM's
one type is stored as dec_self."""

ENC_SELF, ENC_DEC, DEC_SELF = "enc_self", "enc_dec", "dec_self"
ATTENTION_TYPES = (ENC_SELF, ENC_DEC, DEC_SELF)
TYPE_LABELS = {ENC_SELF: "Enc-Enc", ENC_DEC: "Enc-Dec", DEC_SELF: "Dec-Dec"}
