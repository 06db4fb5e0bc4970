"""The fault campaign (``bench/chaos.py``, ``make chaos-full``, ``make chaos-stock-full``; docs/chaos.md):
:mod:`.runner` runs a campaign and writes its report; :mod:`.schedule` draws the faults; :mod:`.faults`
injects them on our cluster (:mod:`.cluster`) or the stock one (:mod:`.stock`, :mod:`.stock_net`), with
network namespaces (:mod:`.netns`, :mod:`.daemon_netns`), nftables and tc (:mod:`.netfilter`), a small
tmpfs disk (:mod:`.disk`) and their undo log (:mod:`.undo`); :mod:`.checks` and :mod:`.trend` compute the
report's figures. Nothing is re-exported here: each name is taken from the module that defines it.
"""
