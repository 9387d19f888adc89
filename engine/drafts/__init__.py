"""Drafts made and measured for a target: distillation on llama.cpp's training API, and a draft's
agreement, acceptance and speed-up."""
