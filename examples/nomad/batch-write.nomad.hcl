# A batch job whose task writes to a volhost volume (README "Nomad bridge").
#
# The group's meta declares the volume: the Nomad bridge claims it for each
# allocation once Nomad places it, volhost publishes it on the node (under
# the node's root_dir), and releases the claim once the client reports the
# allocation complete or failed. The task waits for the published path,
# writes, and ends.
#
#   nomad job run -var root_dir=/var/lib/volhost -var volume=vol1 batch-write.nomad.hcl

variable "root_dir" {
  description = "the volhost node's root_dir (where volhost publishes volumes)"
  type        = string
  default     = "/var/lib/volhost"
}

variable "plugin" {
  description = "the volume's CSI plugin ID in volhost"
  type        = string
  default     = "gce-pd"
}

variable "volume" {
  type    = string
  default = "vol1"
}

variable "cleanup" {
  description = "remove what the task wrote before it ends: for test drivers whose fake mounter makes the target directory the volume itself (a real unpublish would find it not empty)"
  type        = bool
  default     = false
}

variable "datacenters" {
  type    = list(string)
  default = ["*"]
}

job "volhost-batch" {
  type        = "batch"
  datacenters = var.datacenters

  group "writer" {
    restart {
      attempts = 0
      mode     = "fail"
    }

    meta {
      # volhost_volume_<any name> = "[namespace/]volume[:read|write]"
      volhost_volume_data = "default/${var.volume}:write"
    }

    task "write" {
      driver = "raw_exec"

      config {
        command = "/bin/sh"
        args = ["-c", <<-EOT
          target="${var.root_dir}/csi/${var.plugin}/per-alloc/$NOMAD_ALLOC_ID/default/${var.volume}"
          i=0
          while [ ! -d "$target" ]; do
            i=$((i+1))
            if [ $i -gt 600 ]; then echo "volume not published at $target" >&2; exit 1; fi
            sleep 0.1
          done
          echo "written by allocation $NOMAD_ALLOC_ID" > "$target/hello.txt"
          cat "$target/hello.txt"
          if ${var.cleanup}; then rm -f "$target/hello.txt"; fi
        EOT
        ]
      }
    }
  }
}
