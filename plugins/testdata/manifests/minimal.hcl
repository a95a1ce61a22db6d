kind = "csi-adapter"
