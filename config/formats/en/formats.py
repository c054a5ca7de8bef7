"""UI-7: one date format everywhere, the admin's lists and forms as the pages, and it names
its time zone ("2026-12-02 18:48:29 UTC"). Django always localizes, so the format lives in
a format module (FORMAT_MODULE_PATH) rather than in DATETIME_FORMAT alone."""

DATETIME_FORMAT = "Y-m-d H:i:s T"
SHORT_DATETIME_FORMAT = DATETIME_FORMAT
DATE_FORMAT = "Y-m-d"
SHORT_DATE_FORMAT = DATE_FORMAT
TIME_FORMAT = "H:i:s"
