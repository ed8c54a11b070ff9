extension ChartKind {
    /// RevenueCat's trial conversion, cohorted by the day a customer was first seen: of the
    /// customers first seen in each period, how many started a free trial (ever, counted once: the
    /// first), and of those how many converted (a paid transaction in the trial's subscription,
    /// not refunded), are pending (neither, the trial unexpired with auto-renew on) or abandoned
    /// (the rest). Converted, pending and abandoned add up to the trials.
    static func trialConversion(
        _ transactions: [ChartTransaction], customersFirstSeenMs: [Int64], _ periods: [ChartPeriod], _ settings: ChartSettings
    ) -> [[Double?]] {
        var firstTrial: [String: ChartTransaction] = [:]
        for transaction in transactions where transaction.isTrial && !transaction.isFamilyShared && transaction.ownerFirstSeenMs != nil {
            guard let owner = transaction.owner else { continue }
            if let held = firstTrial[owner], (held.purchaseMs, held.transactionId) <= (transaction.purchaseMs, transaction.transactionId) { continue }
            firstTrial[owner] = transaction
        }
        var paidAfter: [String: [Int64]] = [:]
        for transaction in transactions where transaction.isPaid && !transaction.isRefunded {
            paidAfter[transaction.originalTransactionId, default: []].append(transaction.purchaseMs)
        }
        let coverage = Coverage(transactions)
        enum Outcome { case converted, pending, abandoned }
        let trials: [(firstSeenMs: Int64, outcome: Outcome)] = firstTrial.values.map { trial -> (Int64, Outcome) in
            if paidAfter[trial.originalTransactionId]?.contains(where: { $0 >= trial.purchaseMs }) == true {
                return (trial.ownerFirstSeenMs!, .converted)
            }
            let unexpired = coverage.span(trial)?.contains(settings.nowMs) ?? false
            return (trial.ownerFirstSeenMs!, unexpired && trial.willRenew != false ? .pending : .abandoned)
        }
        .sorted { $0.0 < $1.0 }
        let firstSeen = trials.map(\.firstSeenMs)
        return periods.map { period in
            let customers = count(customersFirstSeenMs, from: period.startMs, to: period.endMs)
            let cohort = trials[SpanIndex.count(firstSeen, below: period.startMs)..<SpanIndex.count(firstSeen, below: period.endMs)]
            let converted = cohort.count { $0.outcome == .converted }
            let pending = cohort.count { $0.outcome == .pending }
            return [
                Double(customers), Double(cohort.count), Double(converted), Double(pending), Double(cohort.count - converted - pending),
                rate(cohort.count, customers), rate(converted, cohort.count),
            ]
        }
    }
}
