"""The attention types and their labels, without torch (plotting and the scorecard read them;
``headprune.models.heads`` gates them).

``ATTENTION_TYPES`` are the paper's three, ``TYPE_LABELS`` their labels: BERT has only encoder self-attention;
a decoder-only LM's one type is stored as dec_self. A multimodal wrapper's vision or audio tower, studied only
where asked (``headprune.models.families.decoder``: ``model.config.headprune_towers``), is labelled by its stack:
``TOWER_TYPES`` maps a tower's name to its type, the bidirectional self-attention of its encoder.
``KNOWN_TYPES`` is every type in the order tables and figures show them, ``LABELS`` every type's label.
"""

ENC_SELF, ENC_DEC, DEC_SELF = "enc_self", "enc_dec", "dec_self"
ATTENTION_TYPES = (ENC_SELF, ENC_DEC, DEC_SELF)
TYPE_LABELS = {ENC_SELF: "Enc-Enc", ENC_DEC: "Enc-Dec", DEC_SELF: "Dec-Dec"}
VISION_SELF, AUDIO_SELF = "vision_self", "audio_self"
TOWER_TYPES = {"vision": VISION_SELF, "audio": AUDIO_SELF}
TOWER_LABELS = {VISION_SELF: "Vision tower", AUDIO_SELF: "Audio tower"}
KNOWN_TYPES = ATTENTION_TYPES + tuple(TOWER_TYPES.values())
LABELS = {**TYPE_LABELS, **TOWER_LABELS}
