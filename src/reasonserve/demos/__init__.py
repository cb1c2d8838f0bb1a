"""The demos behind ``reasonserve demo`` (:mod:`.engine`) and ``reasonserve demo-ops`` (:mod:`.ops`)."""
