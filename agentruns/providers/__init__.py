"""Provider adapters behind one small interface (`base`), chosen by the provider's kind."""
